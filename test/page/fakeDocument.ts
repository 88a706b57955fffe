import { vi } from 'vitest';

// Just enough of the DOM for the page's rendering (page/dom.ts's `h`, and what the
// rendered elements are read with) to run in Node: elements, text, attributes,
// listeners. Not a browser: the Chromium test (page.browser.test.ts) proves the wiring.

class FakeNode {
  parent: FakeElement | null = null;

  get textContent(): string {
    return '';
  }

  remove(): void {
    if (!this.parent) return;
    this.parent.childNodes.splice(this.parent.childNodes.indexOf(this), 1);
    this.parent = null;
  }
}

class FakeText extends FakeNode {
  constructor(public data: string) {
    super();
  }

  override get textContent(): string {
    return this.data;
  }
}

export class FakeElement extends FakeNode {
  readonly childNodes: FakeNode[] = [];
  readonly #attributes = new Map<string, string>();
  readonly #listeners = new Map<string, Array<(event: unknown) => void>>();
  /** A form control's value (textarea, select). */
  value = '';

  constructor(readonly tagName: string) {
    super();
  }

  setAttribute(name: string, value: string): void {
    this.#attributes.set(name, value);
  }

  getAttribute(name: string): string | null {
    return this.#attributes.get(name) ?? null;
  }

  removeAttribute(name: string): void {
    this.#attributes.delete(name);
  }

  get hidden(): boolean {
    return this.#attributes.has('hidden');
  }

  set hidden(value: boolean) {
    if (value) this.setAttribute('hidden', '');
    else this.removeAttribute('hidden');
  }

  get title(): string {
    return this.getAttribute('title') ?? '';
  }

  set title(value: string) {
    this.setAttribute('title', value);
  }

  get classList(): { contains(name: string): boolean } {
    const names = (this.getAttribute('class') ?? '').split(/\s+/);
    return { contains: (name) => names.includes(name) };
  }

  override get textContent(): string {
    return this.childNodes.map((child) => child.textContent).join('');
  }

  override set textContent(text: string) {
    this.replaceChildren(text);
  }

  /** The element children, in order. */
  get children(): FakeElement[] {
    return this.childNodes.filter((child) => child instanceof FakeElement);
  }

  append(...children: Array<FakeNode | string>): void {
    for (const child of children) {
      const node = typeof child === 'string' ? new FakeText(child) : child;
      node.remove();
      node.parent = this;
      this.childNodes.push(node);
    }
  }

  replaceChildren(...children: Array<FakeNode | string>): void {
    for (const child of [...this.childNodes]) child.remove();
    this.append(...children);
  }

  addEventListener(type: string, listener: (event: unknown) => void): void {
    this.#listeners.set(type, [...(this.#listeners.get(type) ?? []), listener]);
  }

  click(): void {
    for (const listener of this.#listeners.get('click') ?? []) listener({ type: 'click' });
  }

  /** The descendants (depth first) that have this class. */
  withClass(name: string): FakeElement[] {
    return this.children.flatMap((child) => [
      ...(child.classList.contains(name) ? [child] : []),
      ...child.withClass(name),
    ]);
  }
}

/** Puts the fake `document` and `Node` in the globals until `vi.unstubAllGlobals()`. */
export function useFakeDocument(): void {
  vi.stubGlobal('Node', FakeNode);
  vi.stubGlobal('document', {
    createElement: (tag: string) => new FakeElement(tag),
    createTextNode: (data: string) => new FakeText(data),
  });
}

/** An element the page made, as the fake it is. */
export const fake = (element: Element): FakeElement => element as unknown as FakeElement;
