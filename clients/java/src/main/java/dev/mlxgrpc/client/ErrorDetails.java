package dev.mlxgrpc.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.stream.Collectors;

/**
 * The google.rpc details the server puts in the {@code grpc-status-details-bin} trailer of an
 * error: ErrorInfo (domain "mlxgrpc.v1", a reason and metadata such as {"field": ...}), BadRequest
 * field violations, and RetryInfo on RESOURCE_EXHAUSTED / UNAVAILABLE.
 *
 * <pre>{@code
 * } catch (StatusRuntimeException e) {
 *   ErrorDetails d = ErrorDetails.from(e);
 *   System.out.println(d.code() + " " + d.violationFields());
 * }
 * }</pre>
 */
public final class ErrorDetails {
  private final Status.Code code;
  private final String message;
  private final ErrorInfo errorInfo;
  private final List<BadRequest.FieldViolation> fieldViolations;
  private final RetryInfo retryInfo;

  private ErrorDetails(
      Status.Code code,
      String message,
      ErrorInfo errorInfo,
      List<BadRequest.FieldViolation> fieldViolations,
      RetryInfo retryInfo) {
    this.code = code;
    this.message = message;
    this.errorInfo = errorInfo;
    this.fieldViolations = Collections.unmodifiableList(fieldViolations);
    this.retryInfo = retryInfo;
  }

  /**
   * Extracts the details from a gRPC error (a {@link io.grpc.StatusRuntimeException} or {@link
   * io.grpc.StatusException}, possibly wrapped). Other throwables give code UNKNOWN and no details.
   */
  public static ErrorDetails from(Throwable t) {
    Status status = Status.fromThrowable(t);
    ErrorInfo info = null;
    RetryInfo retry = null;
    List<BadRequest.FieldViolation> violations = new ArrayList<>();
    com.google.rpc.Status rpc = StatusProto.fromThrowable(t);
    if (rpc != null) {
      for (Any any : rpc.getDetailsList()) {
        try {
          if (any.is(ErrorInfo.class)) {
            info = any.unpack(ErrorInfo.class);
          } else if (any.is(BadRequest.class)) {
            violations.addAll(any.unpack(BadRequest.class).getFieldViolationsList());
          } else if (any.is(RetryInfo.class)) {
            retry = any.unpack(RetryInfo.class);
          }
        } catch (InvalidProtocolBufferException e) {
          // A malformed detail is skipped; the status code and message still stand.
        }
      }
    }
    return new ErrorDetails(status.getCode(), status.getDescription(), info, violations, retry);
  }

  /** The status code. */
  public Status.Code code() {
    return code;
  }

  /** The status message (may be null). */
  public String message() {
    return message;
  }

  /** The ErrorInfo detail, when present. */
  public Optional<ErrorInfo> errorInfo() {
    return Optional.ofNullable(errorInfo);
  }

  /** The BadRequest field violations (empty when none). */
  public List<BadRequest.FieldViolation> fieldViolations() {
    return fieldViolations;
  }

  /** The field paths named by BadRequest, e.g. "sampling.temperature". */
  public List<String> violationFields() {
    return fieldViolations.stream()
        .map(BadRequest.FieldViolation::getField)
        .collect(Collectors.toUnmodifiableList());
  }

  /** The RetryInfo detail, when present. */
  public Optional<RetryInfo> retryInfo() {
    return Optional.ofNullable(retryInfo);
  }

  /** How long the server asks the client to wait before retrying, when it said. */
  public Optional<Duration> retryDelay() {
    return retryInfo()
        .filter(RetryInfo::hasRetryDelay)
        .map(r -> Duration.ofSeconds(r.getRetryDelay().getSeconds(), r.getRetryDelay().getNanos()));
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder(code.name());
    if (message != null) {
      sb.append(": ").append(message);
    }
    errorInfo().ifPresent(i -> sb.append(" [").append(i.getDomain()).append('/').append(i.getReason())
        .append(' ').append(i.getMetadataMap()).append(']'));
    if (!fieldViolations.isEmpty()) {
      sb.append(" fields=").append(violationFields());
    }
    retryDelay().ifPresent(d -> sb.append(" retryAfter=").append(d));
    return sb.toString();
  }
}
