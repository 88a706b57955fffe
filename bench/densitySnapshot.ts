// What the heap holds, by kind of object: a V8 heap snapshot of this process
// (live objects only: taking it collects garbage first) summed per kind. Two
// of them, before and after N connections, say what each connection holds.
import { readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeHeapSnapshot } from 'node:v8';

/**
 * [kind, objects, self bytes]. The kind of a JS object is its constructor
 * (`WebSocket`), of a function `closure name`; V8's internal things (property
 * and element stores, hash tables, contexts, code, strings) are named after
 * what holds them: `(object properties) of WebSocket`, `system / Context of
 * closure sendEvent src/server/wsGateway.ts`. A function is named with its file.
 */
export type HeapKind = [kind: string, count: number, bytes: number];

interface RawSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]]; edge_fields: string[]; edge_types: [string[], ...unknown[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

// Kinds whose names are contents (a string's text, a function's code), not types.
const BY_TYPE_ONLY = new Set(['string', 'concatenated string', 'sliced string', 'number', 'code', 'object shape', 'bigint', 'symbol', 'regexp']);
// Kinds that are a JS object's own: named by their constructor or function, not by what holds them.
const OWN_NAME = new Set(['object', 'closure', 'native', 'regexp']);
const COLLECTIONS = new Set(['Map', 'Set', 'WeakMap', 'WeakSet']);

/** The live heap of this process summed by kind, heaviest first. */
export async function heapByKind(): Promise<HeapKind[]> {
  // Written to a file and read back: several times faster than node's snapshot stream.
  const file = writeHeapSnapshot(join(tmpdir(), `tether-bench-density-${process.pid}-${Date.now()}.heapsnapshot`));
  let raw: RawSnapshot;
  try {
    raw = JSON.parse(await readFile(file, 'utf8')) as RawSnapshot;
  } finally {
    await rm(file, { force: true });
  }
  const { meta } = raw.snapshot;
  const width = meta.node_fields.length;
  const [typeAt, nameAt, sizeAt, edgesAt] = ['type', 'name', 'self_size', 'edge_count'].map((f) => meta.node_fields.indexOf(f)) as [number, number, number, number];
  const edgeWidth = meta.edge_fields.length;
  const [edgeTypeAt, edgeNameAt, edgeToAt] = ['type', 'name_or_index', 'to_node'].map((f) => meta.edge_fields.indexOf(f)) as [number, number, number];
  const nodeTypes = meta.node_types[0];
  const edgeTypes = meta.edge_types[0];
  const count = raw.nodes.length / width;

  // Where each node's edges start, and the first strong retainer of each node.
  const firstEdge = new Int32Array(count + 1);
  for (let node = 0; node < count; node++) firstEdge[node + 1] = firstEdge[node]! + raw.nodes[node * width + edgesAt]! * edgeWidth;
  const owner = new Int32Array(count).fill(-1);
  // The name of that edge (a property or variable), as a string index; -1 for an element or hidden edge.
  const ownerEdge = new Int32Array(count).fill(-1);
  // For a scope (context), a function that keeps it: its file names the scope's variables.
  const scopeUser = new Int32Array(count).fill(-1);
  const closureType = nodeTypes.indexOf('closure');
  for (let node = 0; node < count; node++) {
    const isClosure = raw.nodes[node * width + typeAt] === closureType;
    for (let edge = firstEdge[node]!; edge < firstEdge[node + 1]!; edge += edgeWidth) {
      const type = edgeTypes[raw.edges[edge + edgeTypeAt]!];
      if (type === 'weak' || type === 'shortcut') continue;
      const to = raw.edges[edge + edgeToAt]! / width;
      if (isClosure && type === 'internal' && scopeUser[to] === -1 && raw.strings[raw.edges[edge + edgeNameAt]!] === 'context') scopeUser[to] = node;
      if (owner[to] !== -1) continue;
      owner[to] = node;
      if (type !== 'element' && type !== 'hidden') ownerEdge[to] = raw.edges[edge + edgeNameAt]!;
    }
  }
  /** The node a named edge of `node` leads to (of `only` that edge type, when given), or -1. */
  const follow = (node: number, name: string, only?: string): number => {
    if (node === -1) return -1;
    for (let edge = firstEdge[node]!; edge < firstEdge[node + 1]!; edge += edgeWidth) {
      const type = edgeTypes[raw.edges[edge + edgeTypeAt]!];
      if (only !== undefined && type !== only) continue;
      if (type !== 'element' && type !== 'hidden' && raw.strings[raw.edges[edge + edgeNameAt]!] === name) return raw.edges[edge + edgeToAt]! / width;
    }
    return -1;
  };
  const nameOf = (node: number) => raw.strings[raw.nodes[node * width + nameAt]!] ?? '';
  /** A function's file: closure → shared function info → script → name. */
  const fileOf = (closure: number): string => {
    const script = follow(follow(follow(closure, 'shared'), 'script_or_debug_info'), 'name');
    return script === -1 ? '' : shortPath(nameOf(script));
  };

  /** A function's name and file; `with own name` when it carries a `name` property of its own (see OWN_NAME_NOTE). */
  const closureLabel = (node: number, name: string): string => {
    const ownName = follow(node, 'name', 'property');
    const where = fileOf(node);
    // A string node's name is its text.
    const label = ownName === -1 ? `closure ${name || '(anonymous)'}` : `closure ${nameOf(ownName) || name || '(anonymous)'}`;
    return `${label}${where ? ` ${where}` : ''}${ownName === -1 ? '' : ' with own name'}`;
  };
  /** A Map, Set, WeakMap or WeakSet, named by where it is kept: `WeakMap cache in src/protocol/eventJson.ts`, `Map WsGateway.#perConversation`. */
  const collectionLabel = (node: number, name: string): string => {
    const holder = owner[node]!;
    if (holder === -1 || ownerEdge[node] === -1) return name;
    const edge = raw.strings[ownerEdge[node]!] ?? '';
    if (nameOf(holder) !== 'system / Context') return `${name} ${nameOf(holder)}.${edge}`;
    // A variable of a closure's scope: named with the file of the function that keeps the scope.
    const user = scopeUser[holder]!;
    const where = user === -1 ? '' : fileOf(user);
    return `${name} ${edge}${where ? ` in ${where}` : ''}`;
  };
  const typeOf = (node: number) => nodeTypes[raw.nodes[node * width + typeAt]!] ?? 'unknown';
  // Labels are interned: a node's kind is the pair (its own label, its holder's label).
  const labels: string[] = [];
  const interned = new Map<string, number>();
  const labelIds = new Int32Array(count).fill(-1);
  const ownLabel = (node: number): number => {
    if (labelIds[node] !== -1) return labelIds[node]!;
    const type = typeOf(node);
    const name = nameOf(node);
    const text = BY_TYPE_ONLY.has(type)
      ? `(${type})`
      : type === 'closure'
        ? closureLabel(node, name)
        : COLLECTIONS.has(name)
          ? collectionLabel(node, name)
          : name || `(${type})`;
    let id = interned.get(text);
    if (id === undefined) interned.set(text, (id = labels.push(text) - 1));
    labelIds[node] = id;
    return id;
  };

  const totals = new Map<number, { count: number; bytes: number }>();
  for (let node = 0; node < count; node++) {
    const type = typeOf(node);
    if (type === 'synthetic') continue;
    // An internal thing is named after the nearest JS object or function above it (two steps at most).
    let holder = OWN_NAME.has(type) ? -1 : owner[node]!;
    if (holder !== -1 && !OWN_NAME.has(typeOf(holder)) && owner[holder] !== -1) holder = owner[holder]!;
    const key = ownLabel(node) * 2 ** 24 + (holder === -1 ? 0 : ownLabel(holder) + 1);
    const total = totals.get(key) ?? { count: 0, bytes: 0 };
    total.count += 1;
    total.bytes += raw.nodes[node * width + sizeAt]!;
    totals.set(key, total);
  }
  return [...totals.entries()]
    .map(([key, t]): HeapKind => {
      const [own, holder] = [Math.floor(key / 2 ** 24), key % 2 ** 24];
      return [holder === 0 ? labels[own]! : `${labels[own]} of ${labels[holder - 1]}`, t.count, t.bytes];
    })
    .sort((a, b) => b[2] - a[2]);
}

/** What a function `with own name` is, for the notes: such functions are a kind of their own in heapByKind. */
export const OWN_NAME_NOTE =
  'A function `with own name` carries a `name` property of its own: tsx (the loader `bin/tether.js` and the bench run the sources through) compiles with esbuild\'s `keepNames`, which wraps each named arrow function in `__name(fn, "sendEvent")`, an `Object.defineProperty(fn, "name", ...)`; that switches the function object to dictionary-mode properties, with an `(object properties)` store of its own.';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A script's path from the repository root, or from its package (`ws/lib/websocket.js`); node's own as they are. */
function shortPath(url: string): string {
  const path = url.startsWith('file://') ? fileURLToPath(url) : url;
  const inPackage = path.lastIndexOf('node_modules/');
  if (inPackage !== -1) return path.slice(inPackage + 'node_modules/'.length);
  return path.startsWith(ROOT) ? path.slice(ROOT.length) : path;
}

/** What each of `n` things added, by kind (after minus before, divided by n), heaviest first. */
export function perThing(before: readonly HeapKind[], after: readonly HeapKind[], n: number): HeapKind[] {
  const base = new Map(before.map(([kind, count, bytes]) => [kind, { count, bytes }]));
  return after
    .map(([kind, count, bytes]): HeapKind => [kind, (count - (base.get(kind)?.count ?? 0)) / n, (bytes - (base.get(kind)?.bytes ?? 0)) / n])
    .sort((a, b) => b[2] - a[2]);
}
