// The browser harness of the page tests and `npm run screenshot`: Debian's
// Chromium driven by playwright-core (never a downloaded browser), headless,
// with a fresh profile, and nothing allowed to leave the machine.
import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  // Chromium still asks Google's update and account hosts: no name resolves but the loopback.
  '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1',
];

export interface PageSession {
  browser: Browser;
  context: BrowserContext;
  page: Page;
  /** Every URL the page asked for (HTTP requests and WebSocket connections), in order. */
  readonly requests: string[];
  /** Messages the page logged as errors, and uncaught exceptions. */
  readonly pageErrors: string[];
  close(): Promise<void>;
}

/** The page's size in the tests and in docs/page.png. */
export const VIEWPORT = { width: 1280, height: 800 };

/** A headless Chromium with one page of `viewport` size; every request it makes is recorded. */
export async function openBrowser(viewport = VIEWPORT): Promise<PageSession> {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} not found: run \`npm test\` as root (it installs Debian's chromium), or apt-get install chromium`,
    );
  // launch() gives the browser a fresh temporary profile of its own, removed at close.
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const requests: string[] = [];
  const pageErrors: string[] = [];
  context.on('request', (request) => requests.push(request.url()));
  page.on('websocket', (socket) => requests.push(socket.url()));
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (message) => {
    if (message.type() === 'error') pageErrors.push(message.text());
  });
  return {
    browser,
    context,
    page,
    requests,
    pageErrors,
    close: () => browser.close(),
  };
}

/** The requests that went anywhere but 127.0.0.1. */
export function offMachine(requests: readonly string[]): string[] {
  return requests.filter((url) => {
    try {
      return new URL(url).hostname !== '127.0.0.1';
    } catch {
      return true;
    }
  });
}
