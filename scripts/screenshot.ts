// `npm run screenshot`: docs/page.png, the page as the README shows it, made
// with the page tests' own harness (Debian's Chromium, a real server with its
// own nats-server): a conversation with a message, a command and its output,
// the statechart, and the timeline scrubbed to the agent's command.
import { fileURLToPath } from 'node:url';
import { offMachine, openBrowser } from '../test/support/browser.ts';
import { startServer } from '../test/support/serverProcess.ts';

const OUT = fileURLToPath(new URL('../docs/page.png', import.meta.url));
const UI_MS = 15_000;

const server = await startServer({ env: { TETHER_AGENT_DELAY_MS: '200' } });
const browser = await openBrowser();
try {
  const { page } = browser;
  await page.goto(`${server.baseUrl}/`);
  await page.getByTestId('new-conversation').click();
  await page.waitForURL(/conversation=/);
  for (const [text, settled] of [
    ['hello', '.chat .msg.agent >> nth=0'],
    ['!ls -la && echo done', '.chat .output >> nth=0'],
  ] as const) {
    await page.getByTestId('input').fill(text);
    await page.getByTestId('send').click();
    await page.locator(settled).waitFor({ timeout: UI_MS });
  }
  await page.locator('.chat .msg.agent >> nth=1').waitFor({ timeout: UI_MS });
  await page.locator('.timeline button', { hasText: 'command' }).first().click();
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: OUT });
  const off = offMachine(browser.requests);
  if (off.length > 0) throw new Error(`the page asked for ${off.join(', ')}`);
  console.error(`wrote ${OUT}`);
} finally {
  await browser.close();
  await server.stop();
}
