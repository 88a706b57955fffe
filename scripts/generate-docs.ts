// Writes the generated docs: the stored event's JSON Schema and the statechart
// diagram. Tests fail when the committed files differ from what this writes.
import { writeFileSync } from 'node:fs';
import { storedEventJsonSchemaText } from '../protocol/jsonSchema.ts';
import { statechartsMarkdown } from './statecharts.ts';

writeFileSync(new URL('../docs/stored-event.schema.json', import.meta.url), storedEventJsonSchemaText());
console.log('wrote docs/stored-event.schema.json');
writeFileSync(new URL('../docs/statecharts.md', import.meta.url), statechartsMarkdown());
console.log('wrote docs/statecharts.md');
