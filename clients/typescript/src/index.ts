export * from "./client.js";
export * from "./errors.js";
export * from "./generate.js";
export { Attempts, type OnRetry } from "./retry.js";
export * from "./gen/mlxgrpc/v1/generation_pb.js";
export * from "./gen/mlxgrpc/v1/model_pb.js";
export * from "./gen/mlxgrpc/v1/inference_service_pb.js";
export * from "./gen/google/rpc/error_details_pb.js";
export { Code, ConnectError, type CallOptions } from "@connectrpc/connect";
