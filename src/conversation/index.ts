export { Session, type SessionDeps } from './session.ts';
export { readStoredState, snapshotFrom, type StoredRead, type StoredState } from './storedState.ts';
export { projectEntry, projectEntries, wasMidTask } from './conversationIndex.ts';
export { maskingLogger, secretMasker } from './secretMasker.ts';
