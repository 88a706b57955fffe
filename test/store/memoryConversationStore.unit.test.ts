import { memoryConversationStore } from '../../src/store/memoryConversationStore.ts';
import { conversationStoreContract } from './conversationStoreContract.ts';

conversationStoreContract('MemoryConversationStore', async () => memoryConversationStore());
