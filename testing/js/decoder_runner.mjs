// Replays reference cases of testing/js/decoder_cases.py (see replay.mjs) in
// onnxruntime-node or onnxruntime-web's WebAssembly backend. One process runs a
// whole list of cases, so each runtime (the WebAssembly one takes ~1.7 s) is
// loaded once per test shard, not once per case. Prints, as one JSON line,
// {"results": [{"steps": [max |logit diff| per step]} or {"error": "..."}]},
// in the order of the list.
//   node decoder_runner.mjs JOBS.json    (JOBS.json: [{"case": PATH, "backend": "node"|"web"}])
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { load } from './modules.mjs';
import { replay } from './replay.mjs';

const runtimes = {};
async function runtime(backend) {
  if (!runtimes[backend]) {
    const ort = await load(backend === 'web' ? 'onnxruntime-web' : 'onnxruntime-node');
    if (backend === 'web') ort.env.wasm.numThreads = 1;
    runtimes[backend] = ort;
  }
  return runtimes[backend];
}

async function run({ case: casePath, backend }) {
  const testCase = JSON.parse(readFileSync(casePath, 'utf8'));
  const options = backend === 'web'
    ? { executionProviders: ['wasm'] }
    : { executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1 };
  const modelDir = dirname(testCase.model);
  const readFile = async (name) => readFileSync(
    name.startsWith('model.onnx') ? join(modelDir, name) : join(dirname(casePath), name));
  return { steps: await replay(await runtime(backend), testCase, readFile, options) };
}

const jobs = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const results = [];
for (const job of jobs) {
  try {
    results.push(await run(job));
  } catch (error) {
    results.push({ error: String(error?.stack ?? error) });
  }
}
console.log(JSON.stringify({ results }));
