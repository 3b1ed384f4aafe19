"mPLUG-Owl2 port against the original code's outputs (tests/fixtures/mplug_owl2, written by tests/reference/mplug_owl2)."
import copy, json
from pathlib import Path
import pytest, torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForImageTextToText
from pope_audit.foundation.core import InputError
from pope_audit.models.mplug_owl2 import (MplugOwl2Config, MplugOwl2ForConditionalGeneration, convert_checkpoint, port_key,
                                   expand_placeholder)

FIX = Path(__file__).parent/'fixtures'/'mplug_owl2'


@pytest.fixture(scope='module')
def ref_dir(tmp_path_factory):
    return convert_checkpoint(FIX, tmp_path_factory.mktemp('mplug_owl2')/'tiny')


@pytest.fixture(scope='module')
def io():
    return load_file(FIX/'io.safetensors')


@pytest.fixture(scope='module')
def ref(ref_dir):
    return AutoModelForImageTextToText.from_pretrained(ref_dir, attn_implementation='eager').eval()


def port_ids(io, model):
    return torch.tensor([expand_placeholder(io['input_ids'][0].tolist(), model.config.image_token_index)])


def test_fixture_is_small_and_generated():
    assert sum(f.stat().st_size for f in FIX.iterdir()) < 2_000_000
    meta = json.loads((FIX/'meta.json').read_text())
    assert meta['transformers'] == '4.31.0' and meta['seq_len'] == 81
    assert json.loads((FIX/'config.json').read_text())['architectures'] == ['MPLUGOwl2LlamaForCausalLM']


def test_reference_logits_and_attention(ref, io):
    ids = port_ids(io, ref)
    assert (ids == ref.config.image_token_index).long().equal(io['modality_indicators'])
    with torch.no_grad(): o = ref(input_ids=ids, pixel_values=io['pixel_values'], output_attentions=True)
    assert o.logits.shape == io['logits'].shape == (1, 81, 256)
    assert (o.logits - io['logits']).abs().max() < 1e-4
    att = torch.stack(o.attentions)
    assert att.shape == io['attentions'].shape == (2, 1, 4, 81, 81)
    p = int((ids[0] == ref.config.image_token_index).nonzero()[0])
    vis, ref_vis = att[..., p:, p:p + 65], io['attentions'][..., p:, p:p + 65]   # every later query over the 65 visual tokens
    assert (vis - ref_vis).abs().max() < 1e-5
    assert ref_vis[..., -1, :].sum(-1).min() > 0.01                           # the rows compared are not empty
    assert (att - io['attentions']).abs().max() < 1e-5


def test_sdpa_and_attention_switch(ref, io):
    ids = port_ids(io, ref)
    try:
        ref.set_attn_implementation('sdpa')
        with torch.no_grad(): s = ref(input_ids=ids, pixel_values=io['pixel_values'], logits_to_keep=1).logits
    finally: ref.set_attn_implementation('eager')
    assert s.shape == (1, 1, 256) and (s[0, -1] - io['logits'][0, -1]).abs().max() < 1e-4


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_precision(ref_dir, io, dtype):
    "Loaded in fp16/bf16 the port runs and stays near the original's fp32 logits (rounding only)."
    m = AutoModelForImageTextToText.from_pretrained(ref_dir, dtype=dtype).eval()
    assert m.model.language_model.layers[0].self_attn.k_proj.visual.weight.dtype == dtype
    with torch.no_grad(): lg = m(input_ids=port_ids(io, m), pixel_values=io['pixel_values'], logits_to_keep=1).logits[0, -1]
    assert lg.dtype == dtype and (lg.float() - io['logits'][0, -1]).abs().max() < 0.1


def test_wrong_branch_is_caught(ref, io):
    "The reference check can fail: visual tokens through the text branch are far off."
    ids = port_ids(io, ref)
    m = ids == ref.config.image_token_index
    with torch.no_grad():
        emb = ref.model.language_model.embed_tokens(ids.masked_fill(m, 0))
        emb = emb.masked_scatter(m[..., None].expand_as(emb), ref.model.get_image_features(io['pixel_values']))
        wrong = ref(inputs_embeds=emb).logits          # modality mask all false
    assert (wrong - io['logits']).abs().max() > 1e-2


def test_key_map_covers_the_7b_tree_exactly_once():
    names = json.loads((FIX/'names_7b.json').read_text())
    assert len(names) == 894
    with torch.device('meta'): ours = {k: list(v.shape) for k, v in MplugOwl2ForConditionalGeneration(MplugOwl2Config()).state_dict().items()}
    mapped = [(port_key(n), s, n) for n, s in names]
    dropped = [n for k, _, n in mapped if k is None]
    assert len(dropped) == 32 and all(n.endswith('self_attn.rotary_emb.inv_freq') for n in dropped)
    kept = [(k, s) for k, s, _ in mapped if k is not None]
    assert len({k for k, _ in kept}) == len(kept) == len(ours)
    assert dict(kept) == ours


def test_prefix_cache_then_padded_suffix_batch(ref, io):
    "A cached `<s>USER: ▁` + 65 visual tokens, then a left-padded batch of suffixes, equals each uncached forward."
    ids = port_ids(io, ref)
    split = json.loads((FIX/'meta.json').read_text())['split'] - 1 + 65
    g = torch.Generator().manual_seed(0)
    suffixes = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (12, 7, 9)]
    with torch.no_grad():
        pre = ref(input_ids=ids[:, :split], pixel_values=io['pixel_values'], use_cache=True, logits_to_keep=1)
        assert pre.cache.get_seq_length() == 69
        # the original's own cached run on the fixture's suffix
        one = ref(input_ids=ids[:, split:], past_key_values=copy.deepcopy(pre.cache), use_cache=True)
        assert (one.logits - io['suffix_logits']).abs().max() < 1e-4
        L = max(map(len, suffixes))
        sid = torch.zeros(3, L, dtype=torch.long); mask = torch.zeros(3, L, dtype=torch.long)
        for b, s in enumerate(suffixes): sid[b, L - len(s):], mask[b, L - len(s):] = torch.tensor(s), 1
        pos = split + (mask.cumsum(1) - 1).clamp(min=0)
        cache = copy.deepcopy(pre.cache); cache.batch_repeat_interleave(3)
        am = torch.cat([torch.ones(3, split, dtype=torch.long), mask], 1)
        got = ref(input_ids=sid, attention_mask=am, position_ids=pos, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        for b, s in enumerate(suffixes):
            full = ref(input_ids=torch.cat([ids[:, :split], torch.tensor([s])], 1), pixel_values=io['pixel_values'],
                       logits_to_keep=1).logits[0, -1]
            assert (got[b] - full).abs().max() <= 1e-5


def test_nf4_4bit_on_cpu(ref_dir, ref, io):
    pytest.importorskip('bitsandbytes')
    from transformers import BitsAndBytesConfig
    import bitsandbytes as bnb
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_compute_dtype=torch.float32,
                           bnb_4bit_use_double_quant=True)
    m = AutoModelForImageTextToText.from_pretrained(ref_dir, quantization_config=q, device_map='cpu').eval()
    quantised = [n for n, mod in m.named_modules() if isinstance(mod, bnb.nn.Linear4bit)]
    assert 'model.language_model.layers.0.self_attn.k_proj.visual' in quantised
    assert 'model.vision_model.encoder.layers.0.self_attn.query_key_value' in quantised
    assert 'lm_head' not in quantised
    # the 4-bit forward is the fp32 port on the dequantised weights, up to the CPU kernel's bf16 arithmetic
    # (about 1e-2 per layer); dequantise before the first forward, which repacks the weights on some CPUs
    deq = copy.deepcopy(ref)
    with torch.no_grad():
        for n in quantised:
            w = m.get_submodule(n).weight
            deq.get_submodule(n).weight.copy_(bnb.functional.dequantize_4bit(w.data, w.quant_state).float())
        ids = port_ids(io, m)
        lg = m(input_ids=ids, pixel_values=io['pixel_values'], logits_to_keep=1).logits[0, -1]
        want = deq(input_ids=ids, pixel_values=io['pixel_values'], logits_to_keep=1).logits[0, -1]
    assert torch.isfinite(lg).all()
    d_deq, d_orig = (lg - want).abs().max(), (lg - io['logits'][0, -1]).abs().max()
    assert d_deq < 0.1 and d_deq < d_orig / 5, (d_deq, d_orig)


def test_converter_refuses_bad_checkpoints(tmp_path):
    cfg = json.loads((FIX/'config.json').read_text())
    (tmp_path/'a').mkdir(); (tmp_path/'a'/'config.json').write_text(json.dumps({**cfg, 'model_type': 'llama', 'architectures': ['LlamaForCausalLM']}))
    with pytest.raises(InputError, match='not an mPLUG-Owl2'): convert_checkpoint(tmp_path/'a', tmp_path/'out')
    (tmp_path/'b').mkdir(); (tmp_path/'b'/'config.json').write_text(json.dumps(cfg))
    sd = load_file(FIX/'model.safetensors'); sd.pop('model.layers.1.self_attn.v_proj.multiway.1.weight')
    save_file(sd, tmp_path/'b'/'model.safetensors')
    with pytest.raises(InputError, match='1 port weights missing'): convert_checkpoint(tmp_path/'b', tmp_path/'out')
    (tmp_path/'c').mkdir(); (tmp_path/'c'/'config.json').write_text(json.dumps(cfg))
    with pytest.raises(InputError, match='no pytorch_model'): convert_checkpoint(tmp_path/'c', tmp_path/'out')


def test_bin_shards_convert(tmp_path, io, monkeypatch):
    "The released layout: pickled `pytorch_model-*.bin` shards, converted explicitly or by `from_pretrained`."
    src = tmp_path/'released'; src.mkdir()
    (src/'config.json').write_text((FIX/'config.json').read_text())
    sd = load_file(FIX/'model.safetensors'); keys = sorted(sd)
    torch.save({k: sd[k] for k in keys[:50]}, src/'pytorch_model-00001-of-00002.bin')
    torch.save({k: sd[k] for k in keys[50:]}, src/'pytorch_model-00002-of-00002.bin')
    dst = convert_checkpoint(src, tmp_path/'conv')
    idx = json.loads((dst/'model.safetensors.index.json').read_text())['weight_map']
    assert len(idx) == len(sd) - 2 and set(idx.values()) == {'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors'}
    m = AutoModelForImageTextToText.from_pretrained(dst).eval()
    with torch.no_grad(): lg = m(input_ids=port_ids(io, m), pixel_values=io['pixel_values'], logits_to_keep=1).logits
    assert (lg[0, -1] - io['logits'][0, -1]).abs().max() < 1e-4
    monkeypatch.setenv('POPE_AUDIT_CACHE', str(tmp_path/'cache'))
    m2 = AutoModelForImageTextToText.from_pretrained(src).eval()      # converted into the cache on the way
    assert m2.name_or_path.startswith(str(tmp_path/'cache'/'mplug_owl2'))
    with torch.no_grad(): lg2 = m2(input_ids=port_ids(io, m2), pixel_values=io['pixel_values'], logits_to_keep=1).logits
    assert (lg2 - lg).abs().max() == 0


def test_probe_mplug_owl2_template(shared, capsys):
    "The CLI probe on the LLaMA vocabulary with the mplug-owl2 preset derives ▁Yes 3869 / ▁No 1939."
    from pope_audit.interface.cli import main
    main(['probe', '--tokenizer', str(shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'), '--template', 'mplug-owl2'])
    derived = capsys.readouterr().out.split('derived readout set')[1]
    assert "3869 ' Yes'" in derived and "1939 ' No'" in derived


def tiny_family(shared):
    "A random tiny port with the real LLaMA-2 vocabulary, behind the family adapter."
    from pope_audit.models.mplug_owl2 import MplugOwl2, MplugOwl2Processor
    from pope_audit.foundation.tokens import shared_tokenizer
    vc = json.loads((FIX/'config.json').read_text())['visual_config']
    torch.manual_seed(0)
    m = MplugOwl2ForConditionalGeneration(MplugOwl2Config(vocab_size=32000, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                                          num_attention_heads=4, max_position_embeddings=512, visual_config=vc)).eval()
    with torch.no_grad():     # large random norms and branches, so that a mistake in either branch shows in the logits
        for n, p in m.named_parameters():
            if 'norm' in n: p.normal_(1, 0.3)
    return MplugOwl2(m, MplugOwl2Processor(shared_tokenizer(), image_size=28), name='tiny-mplug-owl2')


def test_family_encode(shared):
    from PIL import Image
    fam = tiny_family(shared)
    assert fam.family == 'mplug-owl2' and not fam.experimental and fam.image_token_id == 32000
    enc = fam.encode(Image.new('RGB', (40, 30)), ['Is there a dog in the image?', 'Is there a cup?'])
    assert enc.span == (5, 70) and enc.shared == 70 and enc.ids[0][:70] == enc.ids[1][:70]
    assert enc.vision['pixel_values'].shape == (1, 3, 28, 28)
    assert fam.tokenizer.convert_ids_to_tokens(enc.ids[1][-6:]) == ['.', '▁A', 'SS', 'IST', 'ANT', ':']
    assert 3869 in fam.readout_ids['yes'] and 1939 in fam.readout_ids['no']


def test_runner_matches_uncached_forwards(shared, pope, tmp_path):
    "`run` (shared prefix, left-padded batches) gives the records of one uncached forward per question."
    from PIL import Image
    from pope_audit.running.inference import run
    from pope_audit.benchmarks.scoring import read_records
    from pope_audit.models.tiny import stand_in_images
    fam = tiny_family(shared)
    qs = pope[pope.image.isin(pope.image.unique()[:2])].groupby('split').head(3).reset_index(drop=True)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    out = run(fam, qs, imgs, tmp_path/'run', batch_size=4, max_new_tokens=2, attention=True, progress=False)
    recs = read_records(out)
    assert len(recs) == len(qs)
    fam.model.set_attn_implementation('eager')
    for r in recs:
        inputs = fam.full_inputs(Image.open(imgs/r.image).convert('RGB'), r.question)
        with torch.no_grad(): o = fam.model(**inputs, output_attentions=True)
        ref = o.logits[0, -1]
        assert r.greedy_id == int(ref.argmax())
        assert max(abs(v - float(ref[i])) for i, v in r.logits.items()) < 1e-5
        # the engine's attention capture (cached suffix) equals the eager full forward's last row on the 65 visual tokens
        vis = (inputs['input_ids'][0] == fam.image_token_id).float()
        share = [float((a[0, :, -1].mean(0) * vis).sum()) for a in o.attentions]
        assert max(abs(a - b) for a, b in zip(r.attention['per_layer'], share)) < 1e-5


def test_image_pipeline_matches_the_original(io):
    "The original's `process_images` ('resize' mode + CLIP, run by the reference script at 28 px) on a synthetic image."
    from PIL import Image
    from pope_audit.models.mplug_owl2 import MplugOwl2Processor
    pv = MplugOwl2Processor(None, image_size=28).pixel_values(Image.fromarray(io['image_rgb'].numpy()))
    assert pv.shape == io['image_pixels'].shape == (1, 3, 28, 28) and (pv - io['image_pixels']).abs().max() < 1e-6


def test_engine_first_step_and_continuation_match_generate(shared):
    "The family checklist's items 2-4 (see tests/test_family_suite.py): layout, cached first step and greedy continuation = generate."
    from pope_audit.models.engine import Engine, reference_logits
    from pope_audit.models.tiny import stand_in_image
    f = tiny_family(shared)
    qs = ['Is there a dog in the image?', 'Is there a traffic light in the image?', 'Is there a cat in the image?']
    img = stand_in_image('x.jpg')
    enc = f.encode(img, qs)
    for i, q in enumerate(qs): assert enc.ids[i] == f.full_inputs(img, q)['input_ids'][0].tolist()
    for q, r in zip(qs, Engine(f).answer(img, qs, batch_size=2, max_new_tokens=3)):
        ref = reference_logits(f, img, q)
        assert r['greedy_id'] == int(ref.argmax()) and max(abs(v - float(ref[i])) for i, v in r['logits'].items()) < 1e-4
        inp = f.full_inputs(img, q)
        with torch.no_grad(): g = f.model.generate(**inp, max_new_tokens=3, do_sample=False)[0, inp['input_ids'].shape[1]:]
        assert r['text'] == f.tokenizer.decode(g, skip_special_tokens=True).strip()
