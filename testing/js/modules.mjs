// Loads the pinned npm packages that ./bazelw installs (testing/js/package.json)
// from MOBIUS_NODE_MODULES, wherever the test script itself lives.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export function nodeModules() {
  const dir = process.env.MOBIUS_NODE_MODULES;
  if (!dir) {
    throw new Error('MOBIUS_NODE_MODULES is not set: run the tests through ./bazelw, which installs testing/js');
  }
  return dir;
}

/** import() of an installed package by name (its CommonJS entry, as `require` resolves it). */
export async function load(name) {
  const require = createRequire(join(nodeModules(), 'resolve-from-here.js'));
  const module = await import(pathToFileURL(require.resolve(name)).href);
  return module.default ?? module;
}
