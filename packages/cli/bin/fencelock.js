#!/usr/bin/env node
// The `fencelock` command. A file of its own, kept in the repository, so that npm links the
// command at install time even in a fresh clone, where dist/ is built only afterwards (npm's
// `prepare`); the program itself is packages/cli/src/cli/main.ts.
import '../dist/cli/main.js';
