/**
 * The errors of the Engram client: the same classes as the Python package's (engram.errors and
 * engram.client), read back from the service's `{"error": code, "message"}` body. `code` is the
 * service's stable error code; `status` the HTTP status, when there was an answer.
 */

export class EngramError extends Error {
  code: string = "engram_error";
  status: number | undefined;

  constructor(message: string, status?: number) {
    super(message);
    this.name = new.target.name;
    this.status = status;
  }
}

/** Refused input (HTTP 400/413/422): nothing was changed. */
export class InvalidInput extends EngramError {
  override code = "invalid_input";
}

/** An import document that is not valid: nothing of it was written. */
export class ImportFileError extends InvalidInput {
  override code = "invalid_import";
}

/** No such row: alike for rows that do not exist and rows of another user, so existence never leaks. */
export class NotFound extends EngramError {
  override code = "not_found";
  /** The id the service could not find (as the Python NotFound's `memory_id`). */
  readonly memoryId: string;

  constructor(message: string, memoryId: string, status?: number) {
    super(message, status);
    this.memoryId = memoryId;
  }
}

/** The key may not do this (HTTP 403), e.g. an admin key on a user's memory. */
export class PermissionDenied extends EngramError {
  override code = "permission_denied";
}

/** The service refused the API key: missing, unknown or revoked (HTTP 401). */
export class Unauthorized extends PermissionDenied {
  override code = "unauthorized";
}

/** The write conflicts with the stored state (HTTP 409), e.g. superseding a row superseded already. */
export class Conflict extends EngramError {
  override code = "conflict";
}

/** A model (embedder, reranker) failed on the service. */
export class ModelError extends EngramError {
  override code = "model_error";
}

/** The service's store failed or is busy (HTTP 503). */
export class StorageError extends EngramError {
  override code = "storage_error";
}

/**
 * The service could not be reached (refused, timed out) or did not answer as an Engram service does
 * (not its JSON, a proxy's error page, a route it lacks). A StorageError, as in Python.
 */
export class ServiceUnavailable extends StorageError {
  override code = "service_unavailable";
}

/** The client was used after `close()`: nothing was sent. */
export class ClientClosed extends EngramError {
  override code = "client_closed";
}

/** The service's stable error codes, most specific first. */
export const ERROR_BY_CODE: Record<string, typeof EngramError> = {
  invalid_import: ImportFileError,
  invalid_input: InvalidInput,
  payload_too_large: InvalidInput, // nothing was changed, as with every 4xx
  permission_denied: PermissionDenied,
  forbidden: PermissionDenied,
  unauthorized: Unauthorized,
  conflict: Conflict,
  model_error: ModelError,
  storage_error: StorageError,
  store_busy: StorageError,
};

/** For a code this client does not know (a newer server): what the status means. */
export const ERROR_BY_STATUS: Record<number, typeof EngramError> = {
  400: InvalidInput,
  401: Unauthorized,
  403: PermissionDenied,
  409: Conflict,
  413: InvalidInput,
  422: InvalidInput,
  503: StorageError,
};
