import { memoryCheckpointStore } from '../../src/store/index.ts';
import { checkpointStoreContract } from './checkpointStoreContract.ts';

checkpointStoreContract('MemoryCheckpointStore', async () => memoryCheckpointStore());
