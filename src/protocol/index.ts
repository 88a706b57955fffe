// Temporary: machines/ still imports the protocol from here until the machine version bump of
// issue 21 moves it to the top-level protocol/ (its sources are hashed into the machine version).
export * from '../../protocol/index.ts';
