"""The new-family checklist of `nbs/models/05_models.ipynb`, as tests: every registered family with a tiny builder runs through it.

A new family joins by adding its tiny builder to `BUILDERS` (a function returning `(model, processor)` or a loaded family).
Items 1 (frozen prompt) live in `test_prompt_snapshots.py`; the rest are here.

The generic family's architectures (`TINY_GENERIC`) run the layout, the cached first step and the probe by default. The long check
(`prove_features` on each: prefix, batching, attention against generate and eager attention) runs with POPE_AUDIT_FULL_SUITE=1 and
compares with the catalogue `ls families` reads; POPE_AUDIT_WRITE_CATALOGUE=1 rewrites that catalogue from the proofs.
"""
import json, os
import pytest, torch
from pope_audit.models.engine import Engine, reference_logits
from transformers import BitsAndBytesConfig
from pope_audit.models.adapters import FAMILIES, load_adapter, load_ports, quantization_in_effect
from pope_audit.running.inference import run
from pope_audit.benchmarks.scoring import read_records, score_records
from pope_audit.models.tiny import TINY, save_tiny, stand_in_image, stand_in_images, TINY_GENERIC, VOCABULARY
from pope_audit.models.adapters import Generic, proven_features, write_catalogue
from pope_audit.models.engine import prove_features
from pope_audit.interface.audit import transfer_check

BUILDERS = {name: TINY[name] for name in TINY}
GENERIC_ONLY = {"generic"}   # served through TINY_GENERIC below, one entry per architecture
QS = ['Is there a dog in the image?', 'Is there a traffic light in the image?', 'Is there a cat in the image?']
QS2 = QS[:2]   # the default generic suite: two questions of different lengths (a padded batch)


def family(name):
    model, processor = BUILDERS[name]()     # building may import the family's module, which registers it
    return FAMILIES[name](model, processor)


def test_every_registered_family_is_in_the_suite():
    "A family registered without a tiny builder here has not passed the checklist (experimental ones are listed apart)."
    load_ports()
    missing = {n for n, c in FAMILIES.items() if not c.experimental} - set(BUILDERS) - GENERIC_ONLY
    assert not missing, f'families without a suite entry: {missing}'


@pytest.mark.parametrize('name', list(BUILDERS))
def test_layout_prefix_continuation_attention(shared, name):
    "Items 2-5: processor layout, cached batched first step = generate, continuation = generate, attention capture = eager."
    f = family(name)
    img = stand_in_image('x.jpg')
    enc = f.encode(img, QS)
    for i, q in enumerate(QS): assert enc.ids[i] == f.full_inputs(img, q)['input_ids'][0].tolist()
    eng = Engine(f)
    res = eng.answer(img, QS, batch_size=2, max_new_tokens=3, attention=True)
    for q, r in zip(QS, res):
        ref = reference_logits(f, img, q)
        assert r['greedy_id'] == int(ref.argmax())
        assert max(abs(v - float(ref[i])) for i, v in r['logits'].items()) < 1e-4
        inp = f.full_inputs(img, q)
        with torch.no_grad():
            g = f.model.generate(**inp, max_new_tokens=3, do_sample=False)[0]
            g = g[inp['input_ids'].shape[1]:] if g.shape[0] > 3 else g
        assert r['text'] == f.tokenizer.decode(g, skip_special_tokens=True).strip()
        f.model.set_attn_implementation('eager')
        try:
            with torch.no_grad(): out = f.model(**inp, output_attentions=True)
        finally: f.model.set_attn_implementation('sdpa')
        att = out.attentions if getattr(out, 'attentions', None) else out.language_model_outputs.attentions
        keys = inp['input_ids'][0] == f.image_token_id
        ref_share = [float(w[0, :, -1, :].mean(0)[keys].sum()) for w in att]
        assert max(abs(a - b) for a, b in zip(r['attention']['per_layer'], ref_share)) < 1e-5


@pytest.mark.parametrize('name', list(BUILDERS))
def test_4bit_probe_and_run(shared, name, tmp_path, pope):
    "Items 6-7: NF4 loading on the CPU runs and says NF4; the probe's derived set is non-empty; run writes records that score."
    folder = save_tiny(name, tmp_path/'model')
    # bitsandbytes' CPU 4-bit kernels need in_features % 64 == 0; tiny Qwen2-VL's vision tower is 32 wide (real ones are not)
    skip = dict(model_args=dict(quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4',
                llm_int8_skip_modules=['model.visual', 'lm_head']))) if name == 'qwen2-vl' else {}
    q4 = load_adapter(str(folder), load_in_4bit=True, **skip)
    assert quantization_in_effect(q4.model)['quant_type'] == 'nf4'
    with torch.no_grad(): assert torch.isfinite(Engine(q4).answer(stand_in_image('x.jpg'), QS[:1], max_new_tokens=1)[0]['logsumexp'] * torch.ones(1)).all()
    f = load_adapter(str(folder))
    assert f.readout_ids['yes'] and f.readout_ids['no']
    qs = pope[pope.image.isin(pope.image.unique()[:1])].groupby('split').head(2).reset_index(drop=True)
    out = run(f, qs, stand_in_images(qs.image.unique(), tmp_path/'img'), tmp_path/'run', batch_size=4, max_new_tokens=2, progress=False)
    recs = read_records(out)
    assert len(recs) == len(qs) and set(score_records(recs).readout) >= {'derived', 'greedy'}


# --- the generic family: every architecture of `TINY_GENERIC` (tiny random models built from configs, real tokenizers where shared) ---

FULL = os.environ.get('POPE_AUDIT_FULL_SUITE') == '1' or os.environ.get('POPE_AUDIT_WRITE_CATALOGUE') == '1'
PROOFS = {}


def test_generic_suite_covers_the_catalogue():
    "Every architecture the catalogue lists as proven has a tiny builder here, and at least twelve do."
    assert set(proven_features()) == set(TINY_GENERIC) and len(TINY_GENERIC) >= 12


@pytest.mark.parametrize('arch', list(TINY_GENERIC))
def test_generic_layout_first_step_probe(shared, arch):
    "Default suite, every architecture: the processor's layout, the cached first step (with the catalogue's features) equal to generate, the probe."
    f = Generic(*TINY_GENERIC[arch]())
    assert f.features == proven_features()[arch]['features']
    img = stand_in_image('x.jpg')
    enc = f.encode(img, QS2)
    for i, q in enumerate(QS2):
        assert enc.ids[i] == f.full_inputs(img, q)['input_ids'][0].tolist()
        assert enc.ids[i][:enc.span[1]] == enc.ids[0][:enc.span[1]]            # the image and all before it: one prefix for every question
        assert q in f.tokenizer.decode(enc.ids[i][enc.span[1]:])              # the question comes after the image
        assert f.prompt(q) == f.template.render(q) and q in f.prompt(q)
    assert enc.shared == (enc.span[1] if f.features['prefix'] else 0)
    res = Engine(f).answer(img, QS2, batch_size=2, max_new_tokens=2)
    for q, r in zip(QS2, res):
        ref = reference_logits(f, img, q)
        assert r['greedy_id'] == int(ref.argmax()) and max(abs(v - float(ref[i])) for i, v in r['logits'].items()) < 1e-4
        assert r['batch_size'] == (2 if f.features['batching'] else 1)
    for label in ('yes', 'no'):
        ids = f.readout_ids[label]
        assert ids and all(f.tokenizer.decode([i]).strip().lower() == label for i in ids)
    if VOCABULARY[arch] != 'llama-spm':   # audit's transfer check, before any run: LLaVA's ids say nothing about the answer in another vocabulary
        assert set(transfer_check(f.probe, f.tokenizer).set_verdict) <= {'unrelated', 'excluded'}


@pytest.mark.skipif(not FULL, reason='long check: set POPE_AUDIT_FULL_SUITE=1 (or POPE_AUDIT_WRITE_CATALOGUE=1 to rewrite the catalogue)')
@pytest.mark.parametrize('arch', list(TINY_GENERIC))
def test_generic_features_proven(shared, arch):
    "Long check: each engine feature is on in the catalogue exactly when it equals generate (and eager attention) on this architecture."
    f = Generic(*TINY_GENERIC[arch](), features={})
    proof = prove_features(f, stand_in_image('x.jpg'), QS)
    PROOFS[arch] = dict(template=f.template.name, tokenizer=VOCABULARY[arch], **proof)
    if f.cross_attention: assert not proof['features']['attention'] and 'cross-attention' in proof['why']['attention']
    if os.environ.get('POPE_AUDIT_WRITE_CATALOGUE') != '1': assert proof['features'] == proven_features()[arch]['features']


@pytest.mark.skipif(os.environ.get('POPE_AUDIT_WRITE_CATALOGUE') != '1', reason='writes pope_audit/assets/families.json: set POPE_AUDIT_WRITE_CATALOGUE=1')
def test_write_catalogue():
    "Once every architecture ran, the catalogue `ls families` reads is rewritten from the proofs."
    assert set(PROOFS) == set(TINY_GENERIC)
    write_catalogue(PROOFS)


@pytest.fixture(scope='module')
def vip_dir(tmp_path_factory):
    "The tiny ViP-LLaVA saved as a hub checkpoint would be: an architecture the package has no class for."
    model, proc = TINY_GENERIC['vipllava']()
    d = tmp_path_factory.mktemp('vip')
    model.save_pretrained(str(d)); proc.save_pretrained(str(d))
    return d


def _run_cli(*args):
    import subprocess, sys
    return subprocess.run([sys.executable, '-m', 'pope_audit.interface.cli', *map(str, args)], capture_output=True, text=True)


def test_generic_loads_from_a_folder(shared, vip_dir, tmp_path, pope):
    "`load_adapter` on a folder of an architecture with no class of its own gives the generic family with the catalogue's features and the chat template's prompt."
    f = load_adapter(str(vip_dir))
    assert type(f).__name__ == 'Generic' and f.features == proven_features()['vipllava']['features']
    assert f.prompt('Is there a dog?').endswith('###Human: <image>\nIs there a dog?\nAnswer the question using a single word or phrase.###Assistant:')
    off = load_adapter(str(vip_dir), features={})    # an architecture never proven: every feature off, answers through generate
    qs = pope[pope.split == 'random'].head(3).reset_index(drop=True)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    for fam, name in ((f, 'on'), (off, 'off')):
        out = run(fam, qs, imgs, tmp_path/name, batch_size=4, max_new_tokens=2, progress=False)
        man = json.loads((out/'manifest.json').read_text())
        assert man['engine_features'] == fam.features
        recs = read_records(out)
        assert [r.prompt for r in recs] == [fam.prompt(q) for q in qs.question]    # each record keeps the exact prompt
    a, b = read_records(tmp_path/'on'), read_records(tmp_path/'off')
    assert [r.greedy_id for r in a] == [r.greedy_id for r in b] and {r.batch_size for r in b} == {1}
    assert all(abs(r.logits[i] - q.logits[i]) < 1e-4 for r, q in zip(a, b) for i in r.logits if i in q.logits)


@pytest.mark.parametrize('case', ['processor', 'architecture', 'chat_template'])
def test_generic_bad_input(shared, vip_dir, tmp_path, pope, case):
    "A processor that cannot be built, an architecture transformers cannot load as image-text-to-text, a chat template that places no image: one line, exit 2, nothing written."
    import json, shutil
    bad = tmp_path/'model'; shutil.copytree(vip_dir, bad)
    if case == 'processor':
        for n in ('tokenizer.json', 'tokenizer_config.json', 'tokenizer.model'): (bad/n).unlink(missing_ok=True)
        want = 'cannot build the processor'
    elif case == 'architecture':
        cfg = json.loads((bad/'config.json').read_text()); cfg.update(model_type='gpt2', architectures=['GPT2LMHeadModel'])
        (bad/'config.json').write_text(json.dumps(cfg)); want = "cannot load model type 'gpt2' as image-text-to-text"
    else:
        for p in bad.glob('chat_template.*'): p.write_text("{% for m in messages %}{{ m['content'][1]['text'] }}{% endfor %}" if p.suffix == '.jinja'
                                                           else json.dumps({'chat_template': "{% for m in messages %}{{ m['content'][1]['text'] }}{% endfor %}"}))
        want = 'image in this prompt'   # the processor refuses an image with no placeholder for it
    imgs = stand_in_images(pope[pope.split == 'random'].image.head(2), tmp_path/'img')
    r = _run_cli('run', '--model', bad, '--questions', shared/'data/pope/coco/coco_pope_random.json', '--limit', 2, '--images', imgs, '--out', tmp_path/'run')
    assert r.returncode == 2 and r.stdout == '', r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and want in r.stderr, r.stderr
    assert not (tmp_path/'run').exists()


@pytest.fixture(scope='module')
def thinking_run(tmp_path_factory, shared, bench):
    "The tiny thinking model (Qwen3 vocabulary and template) on the first 12 adversarial questions of the built-in benchmark: (family, run folder, images)."
    from pope_audit.models.tinythink import thinking_vlm_dir
    qs, imgs = bench
    model = str(thinking_vlm_dir())
    out = run(model, qs[qs.split == 'adversarial'].head(12), imgs, tmp_path_factory.mktemp('think')/'run', progress=False, device='cpu')
    return load_adapter(model, device='cpu'), out, imgs


def test_thinking_model_read_after_its_block(thinking_run):
    "Every question is read after </think>: the logits kept are a forward over the prompt and the generated block, at the answer step."
    from PIL import Image
    fam, out, imgs = thinking_run
    man = json.loads((out/'manifest.json').read_text())
    assert man['identity']['thinking']['thinks'] is True and man['identity']['thinking']['switch'] == 'enable_thinking'
    assert 'prefix cache and batching off' in man['thinking_note']
    recs = read_records(out)
    assert recs and all(not r.thinking['think_cut'] and r.thinking['first_step']['greedy_id'] == 151667 for r in recs)
    r = recs[0]
    inp = fam.full_inputs(Image.open(imgs/r.image).convert('RGB'), r.question)
    g = fam.model.generate(**inp, max_new_tokens=r.thinking['answer_step'], do_sample=False)     # the block, as generate writes it
    with torch.no_grad(): lg = fam.model(input_ids=g, attention_mask=torch.ones_like(g), pixel_values=inp['pixel_values'],
                                         image_grid_thw=inp['image_grid_thw'], mm_token_type_ids=(g == fam.image_token_id).long()).logits[0, -1].float()
    assert g[0, inp['input_ids'].shape[1] + r.thinking['think_tokens'] - 1].item() == 151668      # </think> closes the block
    assert max(abs(v - float(lg[i])) for i, v in r.logits.items()) < 1e-3
    acc = score_records(recs, ['derived', 'greedy']).set_index('readout').accuracy
    assert acc['derived'] > 0.6 and acc['greedy'] > 0.6


def test_thinking_off_renders_the_switch(thinking_run):
    "--thinking off puts Qwen3's empty block into the prompt: the engine reads the first step, and records carry no thinking."
    from pope_audit.foundation.reasoning import Thinking
    on = thinking_run[0]
    off = FAMILIES['qwen2-vl'](on.model, on.processor, thinking=Thinking('off'))
    assert off.template.text.endswith('<|im_start|>assistant\n<think>\n\n</think>\n\n') and off.think['thinks'] is False
    assert not on.template.text.endswith('</think>\n\n') and off.probe.derived == on.probe.derived   # the same ids after the block either way
