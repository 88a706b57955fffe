import type { CallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';

/**
 * A tool result as the text an LLM reads: its text items joined, a short note
 * for anything else (the bytes of an image would only cost tokens), and the
 * structured content when that is all there is.
 */
export function toolOutput(result: CallToolResult): string {
  const parts = result.content.map(describe);
  if (parts.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return parts.join('\n');
}

function describe(item: ContentBlock): string {
  switch (item.type) {
    case 'text':
      return item.text;
    case 'image':
    case 'audio':
      return `[${item.type}: ${item.mimeType}, ${item.data.length} bytes base64]`;
    case 'resource_link':
      return `[resource link: ${item.uri}]`;
    case 'resource': {
      const { resource } = item;
      if ('text' in resource && typeof resource.text === 'string') return resource.text;
      const blob =
        'blob' in resource && typeof resource.blob === 'string' ? `, ${resource.blob.length} bytes base64` : '';
      return `[resource: ${resource.uri}${resource.mimeType ? `, ${resource.mimeType}` : ''}${blob}]`;
    }
    default:
      return `[${(item as { type: string }).type}]`;
  }
}
