/** Base of Tether's own errors: a stable `code` for the edge to map, and the `cause`. */
export class TetherError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}
