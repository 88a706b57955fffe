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
 * (`WebSocket`), of a function `closure name file`, of a Map or Set also where
 * it is kept (`WeakMap cache in protocol/eventJson.ts`); V8's internal
 * things (property and element stores, hash tables, scopes, code, strings) are
 * named after what holds them: `(object properties) of WebSocket`.
 */
export type HeapKind = [kind: string, count: number, bytes: number];

interface RawSnapshot {
  snapshot: {
    meta: {
      node_fields: string[];
      node_types: [string[], ...unknown[]];
      edge_fields: string[];
      edge_types: [string[], ...unknown[]];
    };
  };
  nodes: number[];
  edges: number[];
  strings: string[];
}

/** What a function `with own name` is, for the notes: such functions are a kind of their own in heapByKind. */
export const OWN_NAME_NOTE =
  'A function `with own name` carries a `name` property of its own. Under tsx (`tsx bench/run.ts`, and the server before it ran compiled from dist/), esbuild\'s `keepNames` wraps each named arrow function in `__name(fn, "sendEvent")`, an `Object.defineProperty(fn, "name", ...)` that switches the function object to dictionary-mode properties with an `(object properties)` store of its own; `npm run bench` runs tsc output, which has no such wrapper.';

// Kinds whose names are contents (a string's text, a function's code), not types.
const BY_TYPE_ONLY = new Set([
  'string',
  'concatenated string',
  'sliced string',
  'number',
  'code',
  'object shape',
  'bigint',
  'symbol',
  'regexp',
]);
// Kinds that are a JS object's own: named by their constructor or function, not by what holds them.
const OWN_NAME = new Set(['object', 'closure', 'native', 'regexp']);
const COLLECTIONS = new Set(['Map', 'Set', 'WeakMap', 'WeakSet']);
const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** A script's path from the repository root, or from its package (`ws/lib/websocket.js`); node's own as they are. */
function shortPath(url: string): string {
  const path = url.startsWith('file://') ? fileURLToPath(url) : url;
  const inPackage = path.lastIndexOf('node_modules/');
  if (inPackage !== -1) return path.slice(inPackage + 'node_modules/'.length);
  return path.startsWith(ROOT) ? path.slice(ROOT.length) : path;
}

/** A parsed heap snapshot with, for each node, its first strong retainer (its owner) and the edge's name. */
class HeapGraph {
  readonly count: number;
  readonly #raw: RawSnapshot;
  readonly #width: number;
  readonly #at: {
    type: number;
    name: number;
    size: number;
    edges: number;
    edgeType: number;
    edgeName: number;
    edgeTo: number;
  };
  readonly #edgeWidth: number;
  readonly #firstEdge: Int32Array;
  readonly #owner: Int32Array;
  /** The owner edge's name as a string index; -1 for an element or hidden edge. */
  readonly #ownerEdge: Int32Array;
  /** For a scope (context), a function that keeps it: its file names the scope's variables. */
  readonly #scopeUser: Int32Array;

  constructor(raw: RawSnapshot) {
    const { meta } = raw.snapshot;
    const node = (f: string) => meta.node_fields.indexOf(f);
    const edge = (f: string) => meta.edge_fields.indexOf(f);
    this.#raw = raw;
    this.#width = meta.node_fields.length;
    this.#edgeWidth = meta.edge_fields.length;
    this.#at = {
      type: node('type'),
      name: node('name'),
      size: node('self_size'),
      edges: node('edge_count'),
      edgeType: edge('type'),
      edgeName: edge('name_or_index'),
      edgeTo: edge('to_node'),
    };
    this.count = raw.nodes.length / this.#width;
    this.#firstEdge = new Int32Array(this.count + 1);
    for (let n = 0; n < this.count; n++)
      this.#firstEdge[n + 1] = this.#firstEdge[n]! + raw.nodes[n * this.#width + this.#at.edges]! * this.#edgeWidth;
    this.#owner = new Int32Array(this.count).fill(-1);
    this.#ownerEdge = new Int32Array(this.count).fill(-1);
    this.#scopeUser = new Int32Array(this.count).fill(-1);
    this.#findOwners();
  }

  #findOwners(): void {
    const { nodes, edges, strings } = this.#raw;
    const closure = this.#raw.snapshot.meta.node_types[0].indexOf('closure');
    for (let n = 0; n < this.count; n++) {
      const isClosure = nodes[n * this.#width + this.#at.type] === closure;
      for (let e = this.#firstEdge[n]!; e < this.#firstEdge[n + 1]!; e += this.#edgeWidth) {
        const type = this.#edgeType(e);
        if (type === 'weak' || type === 'shortcut') continue;
        const to = edges[e + this.#at.edgeTo]! / this.#width;
        if (
          isClosure &&
          type === 'internal' &&
          this.#scopeUser[to] === -1 &&
          strings[edges[e + this.#at.edgeName]!] === 'context'
        )
          this.#scopeUser[to] = n;
        if (this.#owner[to] !== -1) continue;
        this.#owner[to] = n;
        if (type !== 'element' && type !== 'hidden') this.#ownerEdge[to] = edges[e + this.#at.edgeName]!;
      }
    }
  }

  #edgeType(e: number): string {
    return this.#raw.snapshot.meta.edge_types[0][this.#raw.edges[e + this.#at.edgeType]!] ?? 'unknown';
  }

  typeOf(n: number): string {
    return this.#raw.snapshot.meta.node_types[0][this.#raw.nodes[n * this.#width + this.#at.type]!] ?? 'unknown';
  }

  nameOf(n: number): string {
    return this.#raw.strings[this.#raw.nodes[n * this.#width + this.#at.name]!] ?? '';
  }

  sizeOf(n: number): number {
    return this.#raw.nodes[n * this.#width + this.#at.size]!;
  }

  owner(n: number): number {
    return this.#owner[n]!;
  }

  /** The node a named edge of `n` leads to (of edge type `only`, when given), or -1. */
  #follow(n: number, name: string, only?: string): number {
    if (n === -1) return -1;
    for (let e = this.#firstEdge[n]!; e < this.#firstEdge[n + 1]!; e += this.#edgeWidth) {
      const type = this.#edgeType(e);
      if ((only !== undefined && type !== only) || type === 'element' || type === 'hidden') continue;
      if (this.#raw.strings[this.#raw.edges[e + this.#at.edgeName]!] === name)
        return this.#raw.edges[e + this.#at.edgeTo]! / this.#width;
    }
    return -1;
  }

  /** A function's file: closure → shared function info → script → name. */
  #fileOf(closure: number): string {
    const script = this.#follow(this.#follow(this.#follow(closure, 'shared'), 'script_or_debug_info'), 'name');
    return script === -1 ? '' : shortPath(this.nameOf(script));
  }

  /** A node's own label (not its holder's). */
  label(n: number): string {
    const type = this.typeOf(n);
    const name = this.nameOf(n);
    if (BY_TYPE_ONLY.has(type)) return `(${type})`;
    if (type === 'closure') return this.#closureLabel(n, name);
    if (COLLECTIONS.has(name)) return this.#collectionLabel(n, name);
    return name || `(${type})`;
  }

  /** A function's name and file; `with own name` when it carries a `name` property of its own (see OWN_NAME_NOTE). */
  #closureLabel(n: number, name: string): string {
    const ownName = this.#follow(n, 'name', 'property');
    const where = this.#fileOf(n);
    // A string node's name is its text.
    const shown = (ownName === -1 ? '' : this.nameOf(ownName)) || name || '(anonymous)';
    return `closure ${shown}${where ? ` ${where}` : ''}${ownName === -1 ? '' : ' with own name'}`;
  }

  /** A Map, Set, WeakMap or WeakSet, named by where it is kept: `WeakMap cache in protocol/eventJson.ts`, `Map WsGateway.#perConversation`. */
  #collectionLabel(n: number, name: string): string {
    const holder = this.#owner[n]!;
    if (holder === -1 || this.#ownerEdge[n] === -1) return name;
    const edge = this.#raw.strings[this.#ownerEdge[n]!] ?? '';
    if (this.nameOf(holder) !== 'system / Context') return `${name} ${this.nameOf(holder)}.${edge}`;
    const user = this.#scopeUser[holder]!;
    const where = user === -1 ? '' : this.#fileOf(user);
    return `${name} ${edge}${where ? ` in ${where}` : ''}`;
  }
}

/** Sums the graph's nodes by kind: a node's own label, and for internal things the label of the nearest JS object or function above them. */
function byKind(graph: HeapGraph): HeapKind[] {
  // Labels are interned, so that a kind is a pair of numbers until the end.
  const labels: string[] = [];
  const interned = new Map<string, number>();
  const labelIds = new Int32Array(graph.count).fill(-1);
  const labelId = (n: number): number => {
    if (labelIds[n] !== -1) return labelIds[n]!;
    const text = graph.label(n);
    let id = interned.get(text);
    if (id === undefined) interned.set(text, (id = labels.push(text) - 1));
    labelIds[n] = id;
    return id;
  };
  const totals = new Map<number, { count: number; bytes: number }>();
  for (let n = 0; n < graph.count; n++) {
    const type = graph.typeOf(n);
    if (type === 'synthetic') continue;
    // Two steps up at most: a Map's table is held by the Map, its entries' store by the table.
    let holder = OWN_NAME.has(type) ? -1 : graph.owner(n);
    if (holder !== -1 && !OWN_NAME.has(graph.typeOf(holder)) && graph.owner(holder) !== -1)
      holder = graph.owner(holder);
    const key = labelId(n) * 2 ** 24 + (holder === -1 ? 0 : labelId(holder) + 1);
    const total = totals.get(key) ?? { count: 0, bytes: 0 };
    total.count += 1;
    total.bytes += graph.sizeOf(n);
    totals.set(key, total);
  }
  return [...totals.entries()]
    .map(([key, t]): HeapKind => {
      const [own, holder] = [Math.floor(key / 2 ** 24), key % 2 ** 24];
      return [holder === 0 ? labels[own]! : `${labels[own]} of ${labels[holder - 1]}`, t.count, t.bytes];
    })
    .sort((a, b) => b[2] - a[2]);
}

/** The live heap of this process summed by kind, heaviest first. */
export async function heapByKind(): Promise<HeapKind[]> {
  // Written to a file and read back: several times faster than node's snapshot stream.
  const file = writeHeapSnapshot(join(tmpdir(), `tether-bench-density-${process.pid}-${Date.now()}.heapsnapshot`));
  try {
    return byKind(new HeapGraph(JSON.parse(await readFile(file, 'utf8')) as RawSnapshot));
  } finally {
    await rm(file, { force: true });
  }
}

/** What each of `n` things added, by kind (after minus before, divided by n), heaviest first. */
export function perThing(before: readonly HeapKind[], after: readonly HeapKind[], n: number): HeapKind[] {
  const base = new Map(before.map(([kind, count, bytes]) => [kind, { count, bytes }]));
  return after
    .map(([kind, count, bytes]): HeapKind => [
      kind,
      (count - (base.get(kind)?.count ?? 0)) / n,
      (bytes - (base.get(kind)?.bytes ?? 0)) / n,
    ])
    .sort((a, b) => b[2] - a[2]);
}
