"""The new-family checklist of `nbs/05_models.ipynb`, as tests: every registered family with a tiny builder runs through it.

A new family joins by adding its tiny builder to `BUILDERS` (a function returning `(model, processor)` or a loaded family).
Items 1 (frozen prompt) live in `test_prompt_snapshots.py`; the rest are here.
"""
import pytest, torch
from pope_audit.engine import Engine, reference_logits
from transformers import BitsAndBytesConfig
from pope_audit.models import FAMILIES, load_adapter, load_ports, quantization_in_effect
from pope_audit.inference import run
from pope_audit.scoring import read_records, score_records
from pope_audit.tiny import TINY, save_tiny, stand_in_image, stand_in_images

BUILDERS = {name: TINY[name] for name in TINY}
QS = ['Is there a dog in the image?', 'Is there a traffic light in the image?', 'Is there a cat in the image?']


def family(name):
    model, processor = BUILDERS[name]()     # building may import the family's module, which registers it
    return FAMILIES[name](model, processor)


def test_every_registered_family_is_in_the_suite():
    "A family registered without a tiny builder here has not passed the checklist (experimental ones are listed apart)."
    load_ports()
    missing = {n for n, c in FAMILIES.items() if not c.experimental} - set(BUILDERS)
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
