// dsv4 serve driven by the official SDKs (openai, @anthropic-ai/sdk) and curl. Run by run.sh
// with the server's URL and model id. The embedded model's words are never checked, only what
// every answer must satisfy (shapes, counts, whole = streamed for the same greedy request).
// Prints one line per check, the load test's figures as JSON, and "N passed, M failed".
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [base, model] = process.argv.slice(2);
const oa = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });
const an = new Anthropic({ baseURL: base, apiKey: 'e2e-key', maxRetries: 0, timeout: 120000 });

let passed = 0, failed = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, msg) { if (!cond) throw new Error(msg); }
function eq(a, b, msg) { if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${msg}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`); }

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  for (const line of text.split('\n')) if (line.startsWith(name + ' ')) return Number(line.slice(name.length + 1));
  return NaN;
}
async function until(cond, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) { if (await cond()) return true; await new Promise(r => setTimeout(r, 50)); }
  return false;
}
function checkTimings(t, promptTokens) {
  assert(t && typeof t === 'object', 'timings missing');
  eq(t.prompt_tokens, promptTokens, 'timings.prompt_tokens');
  for (const k of ['prefill_s', 'prefill_tok_s', 'decode_s', 'decode_tok_s', 'cached_tokens', 'generated_tokens'])
    assert(typeof t[k] === 'number', `timings.${k} missing`);
}

const user = (text) => [{ role: 'user', content: text }];
const greedy = { temperature: 0, ignore_eos: true };
const weatherTool = { type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };

await check('openai models.list', async () => {
  const ids = [];
  for await (const m of oa.models.list()) ids.push(m.id);
  assert(ids.includes(model), `models: ${ids}`);
});

await check('anthropic models.list', async () => {
  const page = await an.models.list();
  assert(page.data.some(m => m.id === model), JSON.stringify(page.data));
});

let wholeChat;
await check('openai chat.completions (whole)', async () => {
  const r = await oa.chat.completions.create({ model, messages: user('What is 12 + 30?'), max_tokens: 16, ...greedy });
  wholeChat = r;
  eq(r.object, 'chat.completion', 'object');
  assert(typeof r.choices[0].message.content === 'string', 'content');
  eq(r.choices[0].finish_reason, 'length', 'finish_reason');
  eq(r.usage.completion_tokens, 16, 'completion_tokens');
  checkTimings(r.timings, r.usage.prompt_tokens);
});

await check('openai chat.completions (stream) equals whole', async () => {
  const stream = await oa.chat.completions.create({ model, messages: user('What is 12 + 30?'), max_tokens: 16, ...greedy,
    stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (!c.choices.length) continue;
    text += c.choices[0].delta.content ?? '';
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  eq(text, wholeChat.choices[0].message.content, 'streamed text');
  eq(finish, 'length', 'finish_reason');
  eq(usage.completion_tokens, 16, 'usage');
});

await check('openai chat with tools and a tool result', async () => {
  const messages = [
    { role: 'system', content: 'You can call tools.' },
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
  ];
  const plain = await oa.chat.completions.create({ model, messages: messages.slice(1, 2), max_tokens: 4, temperature: 0 });
  const r = await oa.chat.completions.create({ model, messages, tools: [weatherTool], max_tokens: 24, temperature: 0 });
  assert(r.usage.prompt_tokens > plain.usage.prompt_tokens + 20, 'the tool schema and history are in the prompt');
  for (const c of r.choices[0].message.tool_calls ?? []) JSON.parse(c.function.arguments);  // whatever it calls parses
  assert(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
});

await check('openai chat thinking on gives reasoning_content or content', async () => {
  const r = await oa.chat.completions.create({ model, messages: user('What is 2 + 3?'), max_tokens: 40, temperature: 0,
    reasoning_effort: 'high' });
  const m = r.choices[0].message;
  assert(typeof m.content === 'string', 'content');
  assert(m.reasoning_content === undefined || typeof m.reasoning_content === 'string', 'reasoning_content');
});

await check('openai completions (whole and stream)', async () => {
  const p = { model, prompt: 'Call me Ishmael.', max_tokens: 12, ...greedy };
  const r = await oa.completions.create(p);
  eq(r.object, 'text_completion', 'object');
  eq(r.usage.completion_tokens, 12, 'completion_tokens');
  let text = '';
  for await (const c of await oa.completions.create({ ...p, stream: true })) text += c.choices[0]?.text ?? '';
  eq(text, r.choices[0].text, 'streamed text');
});

await check('openai responses (whole and stream)', async () => {
  const p = { model, instructions: 'Answer briefly.', input: 'What is 2 + 3?', max_output_tokens: 12, ...greedy };
  const r = await oa.responses.create(p);
  eq(r.object, 'response', 'object');
  eq(r.status, 'incomplete', 'status');
  assert(typeof r.output_text === 'string' && r.output_text.length > 0, 'output_text');
  eq(r.usage.output_tokens, 12, 'output_tokens');
  checkTimings(r.timings, r.usage.input_tokens);
  let deltas = '', last = null, seq = -1;
  for await (const ev of await oa.responses.create({ ...p, stream: true })) {
    eq(ev.sequence_number, seq + 1, 'sequence_number');
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    last = ev;
  }
  eq(deltas, r.output_text, 'streamed text');
  eq(last.type, 'response.incomplete', 'last event');
});

await check('openai responses with function tools and call outputs', async () => {
  const r = await oa.responses.create({ model, max_output_tokens: 16, temperature: 0,
    tools: [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters }],
    input: [{ role: 'user', content: 'Weather in Paris?' },
            { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
            { type: 'function_call_output', call_id: 'c1', output: '{"temp_c": 21}' }] });
  assert(['completed', 'incomplete'].includes(r.status), r.status);
  for (const item of r.output) if (item.type === 'function_call') JSON.parse(item.arguments);
});

let wholeMsg;
await check('anthropic messages.create (whole)', async () => {
  const r = await an.messages.create({ model, max_tokens: 16, system: 'Be brief.', messages: user('What is 12 + 30?'), ...greedy });
  wholeMsg = r;
  eq(r.type, 'message', 'type');
  eq(r.stop_reason, 'max_tokens', 'stop_reason');
  eq(r.content[0].type, 'text', 'block type');
  eq(r.usage.output_tokens, 16, 'output_tokens');
  checkTimings(r.timings, r.usage.input_tokens + r.usage.cache_read_input_tokens);
});

await check('anthropic messages.stream equals whole', async () => {
  const s = an.messages.stream({ model, max_tokens: 16, system: 'Be brief.', messages: user('What is 12 + 30?'), ...greedy });
  let text = '';
  s.on('text', (t) => { text += t; });
  const final = await s.finalMessage();
  eq(text, wholeMsg.content[0].text, 'streamed text');
  eq(final.content[0].text, wholeMsg.content[0].text, 'final message');
  eq(final.stop_reason, 'max_tokens', 'stop_reason');
  eq(final.usage.output_tokens, 16, 'usage');
});

await check('anthropic tools, tool_use history and thinking', async () => {
  const r = await an.messages.create({ model, max_tokens: 24, temperature: 1,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    tools: [{ name: 'get_weather', description: 'Weather', input_schema: weatherTool.function.parameters }],
    messages: [{ role: 'user', content: 'Weather in Paris?' },
               { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '21 C' }] }] });
  assert(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason), r.stop_reason);
  for (const b of r.content) assert(['text', 'thinking', 'tool_use'].includes(b.type), b.type);
  const n = await an.messages.countTokens({ model, messages: user('hello') });
  assert(n.input_tokens > 0, 'count_tokens');
});

await check('errors come back as the SDKs\' error classes', async () => {
  try { await oa.chat.completions.create({ model: 'no-such-model', messages: user('x') }); throw new Error('no error'); }
  catch (e) { assert(e instanceof OpenAI.NotFoundError, `got ${e}`); eq(e.status, 404, 'status'); }
  try { await oa.chat.completions.create({ model, messages: user('x'), max_tokens: 10 ** 9 }); throw new Error('no error'); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError, `got ${e}`); assert(/context length/.test(e.message), e.message); }
  try { await oa.chat.completions.create({ model, messages: 'hi' }); throw new Error('no error'); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError, `got ${e}`); assert(/messages/.test(e.message), e.message); }
  try { await an.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image',
          source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }); throw new Error('no error'); }
  catch (e) { assert(e instanceof Anthropic.BadRequestError, `got ${e}`); eq(e.error?.error?.type, 'invalid_request_error', 'type'); }
  const h = await fetch(`${base}/health`);
  eq(h.status, 200, 'health after errors');
});

await check('curl: streaming chat, bad JSON, huge body', async () => {
  const out = execFileSync('curl', ['-sN', `${base}/v1/chat/completions`, '-H', 'content-type: application/json',
    '-d', JSON.stringify({ model, messages: user('hi'), max_tokens: 5, stream: true })], { encoding: 'utf8' });
  assert(out.trimEnd().endsWith('data: [DONE]'), out.slice(-200));
  const bad = execFileSync('curl', ['-s', '-w', '\n%{http_code}', `${base}/v1/chat/completions`, '-d', '{"model":'], { encoding: 'utf8' });
  assert(bad.endsWith('\n400') && /not valid JSON/.test(bad), bad);
  const big = execFileSync('bash', ['-c', `head -c 40000000 /dev/zero | tr '\\0' a | curl -s -o /dev/null -w '%{http_code}' ` +
    `-H 'content-type: application/json' --data-binary @- ${base}/v1/chat/completions`], { encoding: 'utf8' });
  eq(big, '413', 'huge body');
});

await check('cancellation: an aborted stream stops its generation', async () => {
  const before = await metric('dsv4_cancelled_total{reason="disconnect"}');
  const ac = new AbortController();
  const stream = await oa.chat.completions.create({ model, messages: user('Tell a long story.'), max_tokens: 100000,
    ignore_eos: true, stream: true }, { signal: ac.signal });
  let chunks = 0;
  try { for await (const _ of stream) { if (++chunks === 5) ac.abort(); } } catch (e) { /* the abort */ }
  assert(await until(async () => (await metric('dsv4_cancelled_total{reason="disconnect"}')) === before + 1), 'not cancelled');
  assert(await until(async () => (await metric('dsv4_active_sessions')) === 0), 'still active');
  const ac2 = new AbortController();
  const p = an.messages.create({ model, max_tokens: 100000, ignore_eos: true, messages: user('Go on.') }, { signal: ac2.signal });
  setTimeout(() => ac2.abort(), 500);
  await p.then(() => { throw new Error('not aborted'); }, () => {});
  assert(await until(async () => (await metric('dsv4_cancelled_total{reason="disconnect"}')) === before + 2), 'whole request not cancelled');
});

// The bounded load test: 8 concurrent clients x 50 requests, both SDKs, whole and streamed.
const rssBefore = await metric('dsv4_process_resident_bytes');
const lat = [];
let loadFailures = 0;
await check('load: 8 clients x 50 requests, every response complete', async () => {
  const client = async (c) => {
    for (let k = 0; k < 50; k++) {
      const t0 = performance.now();
      try {
        const prompt = `client ${c} request ${k}: tell me something`;
        switch ((c + k) % 4) {
          case 0: {
            const r = await oa.chat.completions.create({ model, messages: user(prompt), max_tokens: 8 });
            assert(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), 'finish_reason');
            assert(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8, 'usage');
            break;
          }
          case 1: {
            let done = false;
            for await (const ch of await oa.chat.completions.create({ model, messages: user(prompt), max_tokens: 8, stream: true }))
              if (ch.choices[0]?.finish_reason) done = true;
            assert(done, 'stream without finish_reason');
            break;
          }
          case 2: {
            const r = await an.messages.create({ model, max_tokens: 8, messages: user(prompt) });
            assert(['end_turn', 'max_tokens', 'tool_use', 'stop_sequence'].includes(r.stop_reason), 'stop_reason');
            break;
          }
          default: {
            const m = await an.messages.stream({ model, max_tokens: 8, messages: user(prompt) }).finalMessage();
            assert(m.stop_reason, 'stream without stop_reason');
          }
        }
      } catch (e) {
        loadFailures++;
        console.log(`load failure (client ${c}, request ${k}): ${e}`);
      }
      lat.push(performance.now() - t0);
    }
  };
  await Promise.all([...Array(8).keys()].map(client));
  eq(loadFailures, 0, 'failures');
  eq(lat.length, 400, 'requests');
});
await until(async () => (await metric('dsv4_active_sessions')) === 0);
await new Promise(r => setTimeout(r, 500));
const rssAfter = await metric('dsv4_process_resident_bytes');
lat.sort((a, b) => a - b);
const pct = (p) => lat.length ? Math.round(lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]) : null;
const figures = { requests: lat.length, failures: loadFailures, p50_ms: pct(0.5), p99_ms: pct(0.99), max_ms: pct(1),
  rss_before_mib: +(rssBefore / 2 ** 20).toFixed(1), rss_after_mib: +(rssAfter / 2 ** 20).toFixed(1) };
console.log(`load test: ${JSON.stringify(figures)}`);
await check('load: memory returns to its baseline', async () => {
  // The prefix cache keeps at most 32 small sessions; anything more is a leak.
  assert(rssAfter - rssBefore < 32 * 2 ** 20, `RSS grew by ${((rssAfter - rssBefore) / 2 ** 20).toFixed(1)} MiB`);
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
