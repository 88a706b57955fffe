export { Session, type SessionDeps, type StoredState, type SubmitResult } from './session.ts';
export { readStoredState, snapshotFrom, wasMidTask, type StoredRead } from './storedState.ts';
export { maskingLogger, secretMasker } from './secretMasker.ts';
