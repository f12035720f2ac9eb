export * from "./client.js";
export * from "./errors.js";
export type { components, paths } from "./openapi.js";
