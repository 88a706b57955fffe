/** Attributes of an element made by `h`: `class`, `data-*`, any attribute; `on*` functions become listeners. */
export type Props = Record<string, string | number | boolean | null | undefined | ((event: Event) => void)>;
type Child = Node | string | number | null | undefined | false;

/** An element with attributes and children: `h('button', {class: 'x', onclick: f}, 'Go')`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** Replaces the children of `parent`. */
export function fill(parent: Element, ...children: Child[]): void {
  parent.replaceChildren(
    ...children.flatMap((c) =>
      c === null || c === undefined || c === false ? [] : [c instanceof Node ? c : String(c)],
    ),
  );
}
