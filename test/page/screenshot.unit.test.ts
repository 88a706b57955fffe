import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { VIEWPORT } from '../support/browser.ts';

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

describe('docs/page.png (npm run screenshot)', () => {
  it('exists, is a PNG, and has the page’s size', () => {
    const png = readFileSync(new URL('../../docs/page.png', import.meta.url));
    expect(png.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true);
    // The first chunk is IHDR: width and height, big-endian, at bytes 16 and 20.
    expect(png.subarray(12, 16).toString('latin1')).toBe('IHDR');
    expect({ width: png.readUInt32BE(16), height: png.readUInt32BE(20) }).toEqual(VIEWPORT);
  });

  it('is shown in the README', () => {
    expect(readFileSync(new URL('../../README.md', import.meta.url), 'utf8')).toMatch(/!\[[^\]]*\]\(docs\/page\.png\)/);
  });
});
