#!/usr/bin/env node
// Makes sure Debian's Chromium is on this machine before the page tests or
// `npm run screenshot` drive it (playwright-core never downloads a browser):
// installed with apt-get when we are root, otherwise a clear message and a
// non-zero exit.
import { accessSync, constants } from 'node:fs';
import { aptInstall } from './apt.js';

export const CHROMIUM = '/usr/bin/chromium';

const HOW_TO_INSTALL =
  `Chromium was not found at ${CHROMIUM}; the page tests drive it. ` +
  'Install it with `sudo apt-get install chromium` (Debian), then run the command again.';

function present() {
  try {
    accessSync(CHROMIUM, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

try {
  if (!present()) {
    aptInstall('chromium', HOW_TO_INSTALL, (line) => console.error(line));
    if (!present()) throw new Error(`apt-get finished but ${CHROMIUM} is still missing. ${HOW_TO_INSTALL}`);
  }
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
