import { isIPv4, isIPv6 } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';

/** The names this machine answers to besides loopback: its interfaces' addresses and its host name. */
export interface MachineNames {
  addresses: string[];
  hostname: string;
}

/** This machine's names as the OS tells them now (an interface that comes later is not among them). */
export function thisMachine(): MachineNames {
  return {
    addresses: Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address)),
    hostname: hostname(),
  };
}

const WILDCARDS = new Set(['0.0.0.0', '::']);

/**
 * The names a server without tokens answers to, besides loopback ones (see
 * `allowsHost`): the address it listens on or, on every interface (`0.0.0.0`,
 * `::`), this machine's addresses and host name too; and the host of its public URL.
 */
export function allowedHosts(listen: string, publicUrl?: string, machine: () => MachineNames = thisMachine): string[] {
  const names = [listen];
  if (WILDCARDS.has(nameOf(listen) ?? '')) {
    // Either wildcard address names this server: a Host of 0.0.0.0 reaches a server on `::` too.
    const { addresses, hostname } = machine();
    names.push(...WILDCARDS, ...addresses, hostname);
  }
  if (publicUrl !== undefined) names.push(new URL(publicUrl).hostname);
  return names;
}

/**
 * Whether a `Host` header names this server: a loopback name (`localhost`,
 * `*.localhost`, `127.0.0.0/8`, `::1`) or one of `allowed`, whatever its port
 * and case. A page of another site whose name resolves to this machine (DNS
 * rebinding) sends its own name, so is refused, like a request with no `Host`.
 */
export function allowsHost(allowed: readonly string[]): (host: string | undefined) => boolean {
  const names = new Set(allowed.flatMap((name) => nameOf(name) ?? []));
  return (host) => {
    const name = host === undefined ? null : hostnameOf(host);
    return name !== null && (isLoopback(name) || names.has(name));
  };
}

/** Why a request was refused for its `Host`, and how to serve that name. */
export function foreignHostMessage(host: string | undefined): string {
  const named = host === undefined ? 'a request without a Host header' : `Host ${JSON.stringify(host.slice(0, 100))}`;
  return `${named} does not name this server: without tokens it answers only to loopback names, TETHER_HOST and the host of TETHER_PUBLIC_URL`;
}

function isLoopback(name: string): boolean {
  return (
    name === 'localhost' || name.endsWith('.localhost') || name === '::1' || (isIPv4(name) && name.startsWith('127.'))
  );
}

/** A name or address of `allowed`, IPv6 with or without brackets, as `hostnameOf` reads it. */
function nameOf(value: string): string | null {
  return hostnameOf(isIPv6(value) ? `[${value}]` : value);
}

/**
 * The name in a `Host` header (a name or address, IPv6 in brackets, maybe a
 * port) as the URL parser reads it (lower case, IPv6 compressed), without
 * brackets or a trailing dot; null for anything that is not a host.
 */
function hostnameOf(host: string): string | null {
  if (!/^(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(:\d{1,5})?$/i.test(host)) return null;
  const name = URL.parse(`http://${host}`)?.hostname;
  return name ? name.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '') : null;
}
