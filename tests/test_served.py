"A served model (`run --endpoint`) against a stand-in OpenAI-compatible server on 127.0.0.1: logprobs read, ids placed, coverage, concurrency, resume after a kill, bad input."
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from pope_audit.interface.cli import main
from pope_audit.foundation.readouts import READOUTS
from pope_audit.benchmarks.scoring import load_answers, score_summary, read_records
from fake_server import FakeServer, scores

HERE = Path(__file__).parent


@pytest.fixture(scope='module')
def bench(tmp_path_factory):
    "The built-in benchmark, 6 images (54 questions: 6 per image in each of 3 splits)."
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    d = tmp_path_factory.mktemp('bench')
    synthetic_benchmark(d, 3, seed=3)
    return d


@pytest.fixture(scope='module')
def tok(shared): return str(shared/'tokenizers/llama-3.1')      # the served model's tokenizer (the quickest real one to load)


def run(capsys, *args):
    "`pope-audit run …`: (exit code, stderr)."
    try: main(['--quiet', 'run', *map(str, args)]); code = 0
    except SystemExit as e: code = e.code
    return code, capsys.readouterr().err


def served(bench, url, out, *more):
    return ['--endpoint', url, '--questions', bench, '--images', bench/'images', '--out', out, *more]


def test_records_hold_what_came_back(bench, tok, tmp_path, capsys):
    with FakeServer(owned_by='vllm', ids='vllm', id_of={'Yes': 9642, 'yes': 9891, 'No': 2822, 'no': 2201}.get) as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'r', '--tokenizer', tok))
    assert code == 0, err
    body = fake.requests[-1]
    assert body['temperature'] == 0 and body['max_tokens'] == 1 and body['logprobs'] is True and body['top_logprobs'] == 20
    assert body['return_tokens_as_token_ids'] is True                               # vLLM: exact ids asked for
    assert body['messages'][0]['content'][0]['image_url']['url'].startswith('data:image/png;base64,')
    recs = read_records(tmp_path/'r')
    distinct = {(r.image, r.question) for r in recs}
    assert len(recs) == 54 and len(fake.requests) == len(distinct) + 2 < 54       # one request per distinct question, and the preflight's two
    r = recs[0]
    img_url = fake.requests[2]['messages'][0]['content'][0]['image_url']['url']
    want = scores(r.question + '\nAnswer the question using a single word or phrase.', img_url)
    # vLLM's token_id:N spelling: ids exact (the server's own, here the derived ids), text from the bytes
    assert r.logits[9642] == want['Yes'] and r.logits[2822] == want['No'] and r.logits[2201] == want['no']
    assert [t[0] for t in r.served['tokens']][:3] == sorted(want, key=lambda t: (-want[t], t))[:3]
    assert r.derived == {'yes': [9642, 9891], 'no': [2201, 2822]} and r.source == 'served'
    assert READOUTS['derived'](r) == ('yes' if max(want['Yes'], want['yes']) > max(want['No'], want['no']) else 'no')
    m = json.loads((tmp_path/'r/manifest.json').read_text())
    assert m['identity']['served'] == {'kind': 'vllm', 'model': 'fake-vlm'} and m['identity']['request']['top_logprobs'] == 20
    assert m['status'] == 'complete' and m['environment']['endpoint'] == fake.url


def decided(rec) -> bool:
    "Do the returned tokens fix the derived readout's answer? (A form not returned lies at or below the lowest returned logprob.)"
    toks = {t: lp for t, lp, _ in rec.served['tokens']}
    floor, y, n = min(toks.values()), [toks[t] for t in ('Yes', 'yes') if t in toks], [toks[t] for t in ('No', 'no') if t in toks]
    return bool(y and n) or bool(y and max(y) > floor) or bool(n and max(n) > floor)


def test_coverage_and_fewer_logprobs(bench, tok, tmp_path, capsys):
    for k, server in ((20, dict(logprobs='few')), (2, {})):                      # 3 returned where 20 are asked; 2 asked
        with FakeServer(**server) as fake:
            code, err = run(capsys, *served(bench, fake.url, tmp_path/f'r{k}', '--tokenizer', tok, '--top-logprobs', k))
        assert code == 0, err
        recs = read_records(tmp_path/f'r{k}')
        assert all(len(r.served['tokens']) == min(k, 3) for r in recs)
        cov = score_summary(load_answers(str(tmp_path/f'r{k}')), n_boot=0)['readout_coverage']
        back = [decided(r) for r in recs]
        assert 0 < sum(back) <= len(back) and cov.loc['derived'].mean() == pytest.approx(sum(back) / len(back))
        if k == 2: assert sum(back) < len(back)                                      # 'The' on top, one form at the floor: undecided
        assert all((READOUTS['derived'](r) == 'unknown') != b for r, b in zip(recs, back))
        assert (cov.loc['surface_sum'] == 0).all() and 'greedy' not in cov.index       # a sum needs every id; greedy's unknown is another matter


def test_concurrency_gives_the_same_records(bench, tok, tmp_path, capsys):
    with FakeServer(delay=0.01) as fake:
        for n in (1, 4):
            assert run(capsys, *served(bench, fake.url, tmp_path/f'c{n}', '--tokenizer', tok, '--concurrency', n))[0] == 0
    assert (tmp_path/'c1/records.jsonl').read_bytes() == (tmp_path/'c4/records.jsonl').read_bytes()


def test_resume_after_kill(bench, tok, tmp_path, capsys):
    with FakeServer(delay=0.3) as fake:
        args = served(bench, fake.url, tmp_path/'k', '--tokenizer', tok, '--concurrency', 2)
        p = subprocess.Popen([sys.executable, '-c', 'from pope_audit.interface.cli import main; main()', '--quiet', 'run', *map(str, args)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        rec = tmp_path/'k/records.jsonl'
        t0 = time.time()
        while not (rec.exists() and rec.read_bytes().count(b'\n') >= 4):
            assert p.poll() is None and time.time() - t0 < 120, p.stderr.read() if p.poll() is not None else 'too slow'
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL); p.wait(); p.stderr.close()
        kept = rec.read_bytes().count(b'\n')
        assert 4 <= kept < 54
        fake.delay, before = 0, len(fake.requests)
        assert run(capsys, *args)[0] == 0
        asked = len(fake.requests) - before - 2                                         # less the preflight's two
        before = len(fake.requests)
        assert run(capsys, *served(bench, fake.url, tmp_path/'whole', '--tokenizer', tok))[0] == 0
        whole = len(fake.requests) - before - 2
    assert asked < whole                                                                # only what was missing was asked again
    by_key = lambda f: sorted(f.read_text().splitlines())
    assert by_key(rec) == by_key(tmp_path/'whole/records.jsonl')
    m = json.loads((tmp_path/'k/manifest.json').read_text())
    assert m['status'] == 'complete' and len(m['resumed']) == 1


def test_text_only(bench, tmp_path, capsys):
    with FakeServer(logprobs='refuse') as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'t', '--text-only'))
    assert code == 0, err
    assert 'logprobs' not in fake.requests[-1]
    recs = read_records(tmp_path/'t')
    assert all(r.logits is None and r.text.strip().lower() in ('yes', 'no', 'the') for r in recs)
    names = score_summary(load_answers(str(tmp_path/'t')), n_boot=0)['scores'].readout.unique()
    assert 'derived' not in names and 'pope_parse' in names


def test_no_images_sends_the_question_alone(bench, tok, tmp_path, capsys):
    with FakeServer(images='refuse') as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'n', '--tokenizer', tok, '--no-images', '--limit', 2))
    assert code == 0, err
    assert all(isinstance(b['messages'][0]['content'], str) for b in fake.requests)
    assert json.loads((tmp_path/'n/manifest.json').read_text())['identity']['images'] is None


@pytest.mark.parametrize('server, more, env, message', [
    (dict(logprobs='refuse'), [], {}, "field 'logprobs': the server refuses logprobs (HTTP 400: logprobs is not supported by this server): "
                                      "it cannot give the answer token's log-probabilities; run with --text-only"),
    (dict(logprobs='ignore'), [], {}, 'the server ignores logprobs (its reply holds none)'),
    (dict(images='refuse'), [], {}, "field 'served-model': the served model fake-vlm does not take images: it answers the question alone and refuses it with the image (HTTP 400: image input is not supported"),
    (dict(images='ignore'), [], {}, 'does not take images: its answer\'s logprobs are the same for'),
    (dict(images='as-text'), [], {}, 'does not take images: the prompt takes'),
    (dict(images='refuse-long'), [], {}, 'does not take images: it answers the question alone and refuses it with the image (HTTP 400: Requested tokens'),
    (dict(api_key='sk-1'), [], {}, 'the server requires an API key (HTTP 401: Invalid API key): set it in the environment variable OPENAI_API_KEY'),
    (dict(api_key='sk-1'), ['--api-key-env', 'MY_KEY'], {'MY_KEY': 'sk-2'}, 'the server refuses the API key in MY_KEY'),
    (dict(), ['--served-model', 'gpt-9'], {}, "field 'served-model': the server at"),
    (dict(), ['--no-tokenizer'], {}, "field 'tokenizer': the logprob readouts need the served model's tokenizer"),
    (dict(), ['--model', 'x'], {}, "--model sets up a model run here; --endpoint asks a server: leave it out"),
])
def test_bad_input(bench, tok, tmp_path, capsys, monkeypatch, server, more, env, message):
    for k, v in env.items(): monkeypatch.setenv(k, v)
    monkeypatch.delenv('OPENAI_API_KEY', raising=False)
    tok = [] if '--no-tokenizer' in more else ['--tokenizer', tok]
    with FakeServer(**server) as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'bad', *tok, *[m for m in more if m != '--no-tokenizer']))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path/'bad').exists()


def test_key_given_and_cap_and_retries(bench, tok, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv('OPENAI_API_KEY', 'sk-1')
    with FakeServer(api_key='sk-1', max_logprobs=5, fail_first=2) as fake:            # 503 twice (loading), then at most 5 logprobs
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'k', '--tokenizer', tok, '--limit', 1))
    assert code == 0, err
    assert json.loads((tmp_path/'k/manifest.json').read_text())['identity']['request']['top_logprobs'] == 5
    assert all(len(r.served['tokens']) == 5 for r in read_records(tmp_path/'k'))


def test_unreachable(bench, tok, tmp_path):
    from pope_audit.foundation.core import InputError
    from pope_audit.running.served import ServedConfig, run_served
    dead = FakeServer()                                                             # a port bound, then closed: nothing answers there
    dead.httpd.server_close()
    t0 = time.time()
    with pytest.raises(InputError) as e:
        run_served(ServedConfig(dead.url, tokenizer=tok, backoff=0.01, progress=False), [str(bench)], bench/'images', tmp_path/'u')
    assert "field 'endpoint'" in str(e.value) and 'did not answer /models after 5 tries' in str(e.value) and 'is it running' in str(e.value)
    assert not (tmp_path/'u').exists() and time.time() - t0 < 10


def test_timeout(bench, tok, tmp_path):
    from pope_audit.foundation.core import InputError
    from pope_audit.running.served import ServedConfig, run_served
    with FakeServer(delay=2) as fake:                                              # answers, but later than the client waits
        with pytest.raises(InputError) as e:
            run_served(ServedConfig(fake.url, tokenizer=tok, timeout=0.3, retries=1, backoff=0.01, progress=False), [str(bench)], bench/'images', tmp_path/'t')
        assert len(fake.requests) == 2                                             # tried, and tried again
    assert 'did not answer /chat/completions after 2 tries (no answer within 0.3 s)' in str(e.value)
    assert not (tmp_path/'t').exists()


SUFFIX = '\nAnswer the question using a single word or phrase.'


def test_thinking_model_behind_a_server(bench, tok, tmp_path, capsys):
    "A model that thinks first: read after its block (auto re-asks with room for it), the switch sent (on/off), blocks the limit cuts give unknown."
    from fake_server import thought
    with FakeServer() as plain: assert run(capsys, *served(bench, plain.url, tmp_path/'plain', '--tokenizer', tok))[0] == 0
    plain = {(r.image, r.question): r for r in read_records(tmp_path/'plain')}
    want = {k: READOUTS['derived'](r) for k, r in plain.items()}
    with FakeServer(think='inline') as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'auto', '--tokenizer', tok, '--max-think-tokens', 64))
    assert code == 0, err
    recs = read_records(tmp_path/'auto')
    for r in recs:
        n = len(thought(r.question + SUFFIX))
        assert r.thinking == {'think_tokens': n - 1, 'think_cut': False, 'answer_step': n}, r.thinking    # through </think>; the answer after the blank line
        assert READOUTS['derived'](r) == want[(r.image, r.question)] and r.text.startswith('<think>')
        assert r.text.endswith(plain[(r.image, r.question)].text) and READOUTS['pope_parse'](r) == READOUTS['pope_parse'](plain[(r.image, r.question)])   # text readouts: after the block
    asks = [b['max_tokens'] for b in fake.requests[2:]]
    assert asks == [1, 65] * (len(asks) // 2) and 'chat_template_kwargs' not in fake.requests[-1]   # auto: a short ask opens a block, then room for it
    for mode, limit in (('off', 64), ('on', 12)):
        with FakeServer(think='inline') as fake:
            code, err = run(capsys, *served(bench, fake.url, tmp_path/mode, '--tokenizer', tok, '--thinking', mode, '--max-think-tokens', limit))
        assert code == 0, err
        body, recs = fake.requests[-1], read_records(tmp_path/mode)
        assert body['chat_template_kwargs'] == {'enable_thinking': mode == 'on'} and body['max_tokens'] == (1 if mode == 'off' else limit + 1)
        if mode == 'off': assert all(r.thinking is None for r in recs) and [READOUTS['derived'](r) for r in recs] == [want[(r.image, r.question)] for r in recs]
        else:
            cut = [len(thought(r.question + SUFFIX)) >= limit + 1 for r in recs]
            assert 0 < sum(cut) < len(recs)
            for r, c in zip(recs, cut):
                assert r.thinking['think_cut'] is c and (READOUTS['derived'](r) == 'unknown') is c
        m = json.loads((tmp_path/mode/'manifest.json').read_text())
        assert m['identity']['request']['thinking'] == mode and m['identity']['request']['max_think_tokens'] == limit


def test_reasoning_kept_apart_by_the_server(bench, tok, tmp_path, capsys):
    "vLLM's reasoning parser: the block's text comes back as reasoning_content, the answer alone as content; read after the block all the same."
    with FakeServer(think='parser') as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'r', '--tokenizer', tok))
    assert code == 0, err
    recs = read_records(tmp_path/'r')
    assert all(r.served['reasoning'].startswith('<think>') and r.text in ('Yes', 'No', 'yes', 'no', 'The') for r in recs[:10])
    assert all(r.thinking['answer_step'] > 0 and not r.thinking['think_cut'] for r in recs)


def test_vllm_asked_for_every_readouts_ids(bench, tok, tmp_path, capsys):
    "vLLM's logprob_token_ids: LLaVA's ids, outside the top 20, are asked for by id and every logit readout decides; a vLLM that ignores the field gives the top 20 only."
    ids = {'Yes': 9642, 'yes': 9891, 'No': 2822, 'no': 2201}.get
    cover = {}
    for name, takes in (('exact', True), ('older', False)):
        with FakeServer(owned_by='vllm', ids='vllm', id_of=ids, token_ids=takes) as fake:
            code, err = run(capsys, *served(bench, fake.url, tmp_path/name, '--tokenizer', tok))
        assert code == 0, err
        assert 'top logprobs where' not in err
        asked = fake.requests[-1]['logprob_token_ids']
        assert {3582, 1217, 9642, 9891, 2201, 2822} <= set(asked) and asked == sorted(set(asked))
        cover[name] = score_summary(load_answers(str(tmp_path/name)), n_boot=0)['readout_coverage']
        assert json.loads((tmp_path/name/'manifest.json').read_text())['identity']['request']['exact_ids'] is True
    assert (cover['exact'].loc[['two_token', 'eight_token', 'derived']] == 1).all().all()
    assert (cover['older'].loc['two_token'] == 0).all() and (cover['older'].loc['derived'] == 1).all()
    with FakeServer(owned_by='vllm', ids='vllm', id_of=ids, token_ids=True) as fake:
        code, err = run(capsys, *served(bench, fake.url, tmp_path/'top', '--tokenizer', tok, '--top-only'))
    assert code == 0, err
    assert all('logprob_token_ids' not in b for b in fake.requests)
    assert json.loads((tmp_path/'top/manifest.json').read_text())['identity']['request']['exact_ids'] is False
