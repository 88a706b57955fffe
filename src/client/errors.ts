/** Base of the protocol client's errors: a stable `code`, and the `cause`. */
export class ProtocolClientError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** The socket was not open, or closed before the answer came (a ping's pong). */
export class ConnectionClosedError extends ProtocolClientError {
  constructor(what: string) {
    super('CONNECTION_CLOSED', `the connection is not open: ${what}`);
  }
}
