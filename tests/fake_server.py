"A fake OpenAI-compatible chat-completions server on 127.0.0.1, for the served-model tests: its logprobs depend on the question and (unless told otherwise) the image."
from __future__ import annotations
import hashlib, json, math, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# the token texts the fake model can put first, the yes/no forms among them
VOCAB = ['Yes', 'No', 'yes', 'no', ' Yes', ' No', 'The', 'There', 'I', 'A', 'It', 'In', 'This', 'Sure', 'Based', 'Not', 'Maybe', 'YES', 'NO',
         '1', '0', 'Y', 'N', 'none', 'Absolutely']

def _unit(*parts) -> float:
    "A number in [0, 1) fixed by `parts`."
    return int(hashlib.sha256('\x00'.join(map(str, parts)).encode()).hexdigest()[:12], 16) / 16 ** 12

def scores(question:str, image:str|None) -> dict[str, float]:
    "The fake model's log-probabilities at the answer position: yes/no forms near the top, which of them wins fixed by question and image."
    lean = _unit('lean', question, image) * 2 - 1
    out = {}
    for t in VOCAB:
        s = t.strip().lower()
        out[t] = (lean if s == 'yes' else -lean if s == 'no' else -4.0) - 2 * _unit('tok', t, question, image) - (0 if t in ('Yes', 'No', 'yes', 'no') else 1.5)
    if _unit('chatty', question, image) < 0.25: out['The'] = 1.0          # a quarter of the answers start with 'The': no yes/no form on top
    lse = math.log(sum(math.exp(v) for v in out.values()))
    return {t: v - lse for t, v in out.items()}

def thought(question:str) -> list[str]:
    "A thinking model's reasoning block before its answer: 4 to 15 tokens of reasoning, by the question, then the marker and a blank line."
    n = 4 + int(_unit('think', question) * 12)
    return ['<think>', '\n'] + [' hm'] * n + ['</think>', '\n\n']

class FakeServer:
    "Serve `model` on a free loopback port; attributes change how it behaves (set before or between runs)."
    def __init__(self, model:str='fake-vlm', owned_by:str='fake', api_key:str|None=None, logprobs:str='ok', max_logprobs:int|None=None,
                 images:str='read', fail_first:int=0, delay:float=0.0, ids:str|None=None, id_of=None, think:str|None=None,
                 token_ids:bool=False):
        self.model, self.owned_by, self.api_key, self.logprobs, self.max_logprobs = model, owned_by, api_key, logprobs, max_logprobs
        self.think = think   # None; 'inline': a reasoning block in the content and the logprobs; 'parser': the block's text apart (reasoning_content), as vLLM's reasoning parser returns it
        self.images, self.fail_first, self.delay, self.ids, self.id_of = images, fail_first, delay, ids, id_of
        self.token_ids = token_ids   # takes vLLM's logprob_token_ids (as vLLM does from 2026-05): those ids' logprobs beside the sampled token's; else ignored, as older vLLM does
        self.requests, self.hits, self.lock = [], 0, threading.Lock()
        fake = self
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a): pass
            def _send(self, code, obj):
                b = json.dumps(obj).encode()
                self.send_response(code); self.send_header('Content-Type', 'application/json'); self.send_header('Content-Length', str(len(b)))
                try: self.end_headers(); self.wfile.write(b)
                except (BrokenPipeError, ConnectionResetError): pass      # a client that stopped waiting
            def _auth(self):
                if fake.api_key and self.headers.get('Authorization') != f'Bearer {fake.api_key}':
                    self._send(401, {'error': {'message': 'Invalid API key', 'type': 'authentication_error'}}); return False
                return True
            def _starting(self):
                "The first `fail_first` requests are answered 503, as a server still loading its model does."
                with fake.lock:
                    fake.hits += 1
                    n = fake.hits
                if n <= fake.fail_first: self._send(503, {'error': {'message': 'server is starting'}}); return True
                return False
            def do_GET(self):
                if self._starting() or not self._auth(): return
                if self.path.rstrip('/') == '/v1/models': self._send(200, {'object': 'list', 'data': [{'id': fake.model, 'object': 'model', 'owned_by': fake.owned_by}]})
                else: self._send(404, {'error': {'message': f'no route {self.path}'}})
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))))
                if self._starting() or not self._auth(): return
                with fake.lock: fake.requests.append(body)
                if fake.delay: time.sleep(fake.delay)
                self._send(*fake.answer(body))
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), H)
        self.url = f'http://127.0.0.1:{self.httpd.server_address[1]}'
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def answer(self, body:dict) -> tuple[int, dict]:
        "The status and reply to one chat completion."
        if body.get('model') != self.model: return 404, {'error': {'message': f"The model `{body.get('model')}` does not exist."}}
        content = body['messages'][0]['content']
        text = content if isinstance(content, str) else next(c['text'] for c in content if c['type'] == 'text')
        image = None if isinstance(content, str) else next((c['image_url']['url'] for c in content if c['type'] == 'image_url'), None)
        if image and self.images == 'refuse': return 400, {'error': {'message': 'image input is not supported by this model'}}
        if image and self.images == 'refuse-long': return 400, {'error': {'message': f'Requested tokens ({len(image)}) exceed context window of 2048'}}
        k = body.get('top_logprobs')
        if body.get('logprobs') and self.logprobs == 'refuse': return 400, {'error': {'message': 'logprobs is not supported by this server'}}
        if k and self.max_logprobs and k > self.max_logprobs:
            return 400, {'error': {'message': f'Requested top_logprobs of {k} exceeds the maximum of {self.max_logprobs}'}}
        sc = scores(text, image if self.images in ('read', 'as-text') else None)
        order = sorted(sc, key=lambda t: (-sc[t], t))
        block = thought(text) if self.think and (body.get('chat_template_kwargs') or {}).get('enable_thinking', True) else []
        got = (block + [order[0], '<|im_end|>'])[:body.get('max_tokens') or 16]
        cut = order[0] not in got
        content = ''.join(t for t in got if t != '<|im_end|>')
        if self.think == 'parser' and block:                 # vLLM's reasoning parser: the block's text apart from the answer (logprobs cover both)
            content, reasoning = ''.join(t for t in got[len(block):] if t != '<|im_end|>'), ''.join(got[:len(block)])
        choice = {'index': 0, 'message': {'role': 'assistant', 'content': content}, 'finish_reason': 'length' if len(got) == body.get('max_tokens') else 'stop'}
        if self.think == 'parser' and block: choice['message']['reasoning_content'] = reasoning
        if body.get('logprobs') and self.logprobs != 'ignore':
            give = min(k or 0, 3) if self.logprobs == 'few' else (k or 0)
            def entry(t):
                e = {'token': t, 'logprob': sc[t], 'bytes': list(t.encode())}
                i = (self.id_of(t) if self.id_of else None) or 100000 + VOCAB.index(t)     # ids the test names, else made up
                if self.ids == 'field': e['id'] = i
                if self.ids == 'vllm': e['token'] = f'token_id:{i}'
                return e
            other = lambda t: {'token': t, 'logprob': -0.01, 'bytes': list(t.encode()), 'top_logprobs': [{'token': t, 'logprob': -0.01, 'bytes': list(t.encode())}]}
            steps = [other(t) for t in got[:len(block)]]
            tops = [entry(t) for t in order[:give]]
            if self.token_ids and body.get('logprob_token_ids'):
                tok_of = {(self.id_of(t) if self.id_of else None) or 100000 + VOCAB.index(t): t for t in VOCAB}
                asked = [i for i in body['logprob_token_ids'] if tok_of.get(i) != order[0]]
                tops = [entry(order[0])] + [entry(tok_of[i]) if i in tok_of else {'token': f'token_id:{i}', 'logprob': -30.0} for i in asked]
            if not cut: steps.append({**entry(order[0]), 'top_logprobs': tops})
            choice['logprobs'] = {'content': steps}
        n = len(text.split()) + (len(image) // 4 if image and self.images == 'as-text' else 576 if image else 0)   # a VLM: 576 tokens per image
        return 200, {'id': 'cmpl-1', 'object': 'chat.completion', 'model': self.model, 'choices': [choice], 'usage': {'prompt_tokens': n}}

    def __enter__(self): self.thread.start(); return self
    def __exit__(self, *a): self.httpd.shutdown(); self.httpd.server_close()
