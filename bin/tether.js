#!/usr/bin/env node
// The `tether` command. Runs the TypeScript sources through tsx's loader so a
// checkout needs no build step; the Docker image runs the same entry point.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
