export { Session, type SessionDeps, type StoredState } from './session.ts';
export { readStoredState, snapshotFrom, type StoredRead } from './storedState.ts';
export { projectEntry, projectEntries, wasMidTask } from './conversationIndex.ts';
export { maskingLogger, secretMasker } from './secretMasker.ts';
