// transformers.js loads a mobius package folder (--layout transformers.js) as a
// local model and prints what it computes as JSON.
//   node transformers_runner.mjs generate FOLDER CACHE_DIR PROMPT MAX_NEW_TOKENS
//     -> {"text": pipeline('text-generation') output, "tokens": greedy generate() ids}
//   node transformers_runner.mjs TASK FOLDER CACHE_DIR ARGS_JSON [OPTIONS_JSON]
//     -> pipeline(TASK)(...ARGS, OPTIONS): its output, a tensor as {"dims", "data"}
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
} else {
  const task = await pipeline(mode, basename(folder), options);
  const output = await task(...JSON.parse(text), JSON.parse(extra ?? '{}'));
  console.log(JSON.stringify(plain(output)));
}
