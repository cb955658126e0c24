// Replays a reference case of testing/js/decoder_cases.py (see replay.mjs) in
// onnxruntime-node or onnxruntime-web's WebAssembly backend; prints
// {"steps": [max |logit diff| per step]} as JSON.
//   node decoder_runner.mjs CASE.json node|web
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { load } from './modules.mjs';
import { replay } from './replay.mjs';

const [casePath, backend] = process.argv.slice(2);
const testCase = JSON.parse(readFileSync(casePath, 'utf8'));
const ort = await load(backend === 'web' ? 'onnxruntime-web' : 'onnxruntime-node');
const options = backend === 'web'
  ? { executionProviders: ['wasm'] }
  : { executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1 };
if (backend === 'web') ort.env.wasm.numThreads = 1;

const modelDir = dirname(testCase.model);
const readFile = async (name) => readFileSync(
  name.startsWith('model.onnx') ? join(modelDir, name) : join(dirname(casePath), name));
console.log(JSON.stringify({ steps: await replay(ort, testCase, readFile, options) }));
