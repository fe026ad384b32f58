// The google.rpc details the server attaches to an error status.

import { Code, ConnectError } from "@connectrpc/connect";

import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
  type BadRequest_FieldViolation,
  type ErrorInfo,
  type RetryInfo,
} from "./gen/google/rpc/error_details_pb.js";

/** The google.rpc details of a failed call, decoded from `grpc-status-details-bin`. */
export interface ErrorDetails {
  code: Code;
  /** The status message, without Connect's "[code]" prefix. */
  message: string;
  errorInfo?: ErrorInfo;
  fieldViolations: BadRequest_FieldViolation[];
  retryInfo?: RetryInfo;
  /** RetryInfo's delay in milliseconds, when present. */
  retryDelayMs?: number;
}

/** Extracts ErrorInfo, BadRequest field violations and RetryInfo from any thrown error. */
export function errorDetails(err: unknown): ErrorDetails {
  const ce = ConnectError.from(err);
  const errorInfo = ce.findDetails(ErrorInfoSchema)[0];
  const fieldViolations = ce.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations);
  const retryInfo = ce.findDetails(RetryInfoSchema)[0];
  const delay = retryInfo?.retryDelay;
  const retryDelayMs = delay ? Number(delay.seconds) * 1000 + delay.nanos / 1e6 : undefined;
  return { code: ce.code, message: ce.rawMessage, errorInfo, fieldViolations, retryInfo, retryDelayMs };
}
