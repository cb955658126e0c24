// transformers.js loads a mobius package folder (--layout transformers.js) as a
// local model and prints what it computes as JSON.
//   node transformers_runner.mjs generate FOLDER CACHE_DIR PROMPT MAX_NEW_TOKENS
//     -> {"text": pipeline('text-generation') output, "tokens": greedy generate() ids}
//   node transformers_runner.mjs TASK FOLDER CACHE_DIR ARGS_JSON [OPTIONS_JSON]
//     -> pipeline(TASK)(...ARGS, OPTIONS): its output, a tensor as {"dims", "data"}
//   (OPTIONS' "dtype", if any, is pipeline()'s: q4, q8, ...)
//   TASK text2text-generation or automatic-speech-recognition (ARGS: [text] or [path of
//   raw float32 16 kHz samples]) -> {"output": the pipeline's, "tokens": greedy generate()
//   ids of its tokenizer's / processor's inputs}
import { readFileSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { load } from './modules.mjs';

const [mode, folder, cacheDir, text, extra] = process.argv.slice(2);
const { pipeline, env, Tensor } = await load('@huggingface/transformers');
env.allowRemoteModels = false;
env.localModelPath = dirname(folder);
env.cacheDir = cacheDir;
const options = { device: 'cpu' };

/** JSON of a pipeline's output: tensors as their dims and float data. */
function plain(value) {
  if (value instanceof Tensor) {
    return { dims: value.dims, data: Array.from(value.data, Number) };
  }
  if (Array.isArray(value)) {
    return value.map(plain);
  }
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  }
  return typeof value === 'bigint' ? Number(value) : value;
}

if (mode === 'generate') {
  const generator = await pipeline('text-generation', basename(folder), options);
  const settings = { max_new_tokens: Number(extra), do_sample: false };
  const [output] = await generator(text, { ...settings, return_full_text: false });
  const inputs = generator.tokenizer(text);
  const ids = await generator.model.generate({ ...inputs, ...settings });
  console.log(JSON.stringify({ text: output.generated_text, tokens: Array.from(ids.data, Number) }));
} else if (mode === 'text2text-generation' || mode === 'automatic-speech-recognition') {
  const { dtype, ...settings } = JSON.parse(extra ?? '{}');
  const task = await pipeline(mode, basename(folder), dtype ? { ...options, dtype } : options);
  const [input] = JSON.parse(text);
  const speech = mode === 'automatic-speech-recognition';
  const source = speech ? new Float32Array(new Uint8Array(readFileSync(input)).buffer) : input;
  const output = await task(source, settings);
  const inputs = speech ? await task.processor(source) : task.tokenizer(source);
  const ids = await task.model.generate({ ...inputs, ...settings });
  console.log(JSON.stringify({ output: plain(output), tokens: Array.from(ids.data, Number) }));
} else {
  const { dtype, ...settings } = JSON.parse(extra ?? '{}');
  const task = await pipeline(mode, basename(folder), dtype ? { ...options, dtype } : options);
  const output = await task(...JSON.parse(text), settings);
  console.log(JSON.stringify(plain(output)));
}
