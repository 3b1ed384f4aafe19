"""Grounding corrections (nbs/corrections/15a_grounding): the runner's cached, batched path against a direct implementation written
here from each paper's description — one uncached forward of the whole prompt per question, attention computed by an
attention function of this file that edits or records the full score matrix — plus the closed forms, the no-op flag
and the command line."""
import json, math
import numpy as np
import pytest, torch
from PIL import Image
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.integrations.sdpa_attention import repeat_kv
from pope_audit.running.inference import run
from pope_audit.models.adapters import load_adapter
from pope_audit.models.tiny import stand_in_images
from pope_audit.corrections.methods import make_corrections
from pope_audit.corrections.grounding import SPATIAL_WORDS

torch.set_num_threads(1)
SPECS = ['ugaa', 'ugaa-magnitude', 'ugaa:window=anchor', 'ugaa:rows=bos', 'pai', 'pai:apc_beta=none,gamma=2', 'vaf',
         'vaf:end=1,enhance=1.5,start=0', 'adaptvis', 'adaptvis:threshold=0.9,w_high=2']

# ---- the direct implementation: one attention function for every module, told by a global what to do -----------------
STATE = {}


def direct_attention(module, q, k, v, attention_mask, scaling=None, dropout=0.0, **kw):
    g = getattr(module, 'num_key_value_groups', 1)
    k, v = repeat_kv(k, g), repeat_kv(v, g)
    s = q @ k.transpose(2, 3) * (scaling if scaling is not None else q.shape[-1] ** -0.5)
    layer = STATE.get('layers', {}).get(id(module))
    edit = STATE.get('edit')
    T, img = s.shape[-1], STATE.get('img')
    if layer is not None and edit and layer in edit['layers']:
        if edit['kind'] == 'vaf':                       # rows after the image: image ×e, keys before the image ×u
            after = torch.arange(T - s.shape[-2], T) > img.max()
            for r in torch.nonzero(after)[:, 0].tolist():
                s[:, :, r, img] = s[:, :, r, img] * edit['e']
                s[:, :, r, :int(img.min())] = s[:, :, r, :int(img.min())] * edit['u']
        if edit['kind'] == 'adaptvis':                  # last row, before the mask: image × w
            s[:, :, -1, img] = s[:, :, -1, img] * edit['w']
    if attention_mask is not None: s = s + attention_mask[:, :, :, :T]
    if layer is not None and edit and layer in edit['layers'] and edit['kind'] == 'pai':   # last row, after the mask
        s[:, :, -1, img] = s[:, :, -1, img] + edit['alpha'] * s[:, :, -1, img].abs()
    w = torch.softmax(s.float(), -1).to(q.dtype)
    if layer is not None and 'keep' in STATE: STATE['keep'][layer] = w[0].mean(0)     # [q, k], mean over heads
    return (w @ v).transpose(1, 2).contiguous(), w


AttentionInterface.register('direct_test', direct_attention)
AttentionMaskInterface.register('direct_test', eager_mask)


@torch.no_grad()
def forward(fam, inp, **state):
    "Last-position logits of one whole prompt through `direct_attention`, with `state` set."
    STATE.clear(); STATE.update(layers={id(l.self_attn): i for i, l in enumerate(fam.decoder_layers())}, **state)
    impl = fam.model.config._attn_implementation
    fam.model.set_attn_implementation('direct_test')
    try: return fam.model(**inp).logits[0, -1].float()
    finally: fam.model.set_attn_implementation(impl); STATE.clear()


def layers_of(fam, c):
    from pope_audit.corrections.grounding import layer_range
    return layer_range(c.params['start'], c.params['end'], len(fam.decoder_layers()))


def margin(z, ids): return max(float(z[i]) for i in ids['yes']) - max(float(z[i]) for i in ids['no'])


def contrast_tau(z1, zt, ids, gamma, beta):
    "PAI's refinement id by id: γ·z1 − (γ−1)·zt on the whole vocabulary, APC on z1; returns (τ_c, frozen)."
    z1, zt = z1.tolist(), zt.tolist()
    comb = [gamma * a - (gamma - 1) * b for a, b in zip(z1, zt)]
    thr = max(z1) + math.log(beta) if beta is not None else -math.inf
    kY, kN = [i for i in ids['yes'] if z1[i] >= thr], [i for i in ids['no'] if z1[i] >= thr]
    if not kY or not kN: return 0.0, True
    d1 = max(z1[i] for i in ids['yes']) - max(z1[i] for i in ids['no'])
    return d1 - (max(comb[i] for i in kY) - max(comb[i] for i in kN)) / gamma, False


def direct_tau(fam, c, img, q, z):
    "τ of correction `c` for one question, from whole-prompt forwards (z: the baseline's logits)."
    inp = fam.full_inputs(img, q)
    ids = inp['input_ids'][0]
    pos = torch.nonzero(ids == fam.image_token_id)[:, 0]
    rid, p = fam.readout_ids, c.params
    if c.name.startswith('ugaa'):
        keep = {}
        forward(fam, inp, keep=keep, img=pos)
        toks = fam.tokenizer.convert_ids_to_tokens(ids.tolist())
        rows = [0] if p['rows'] == 'bos' else [i for i, t in enumerate(toks) if i > int(pos.max()) and t.lstrip('▁Ġ').lower() in SPATIAL_WORDS]
        if not rows: return float(p['beta'])
        cols = pos if p['window'] == 'image' else torch.arange(1, 1 + len(pos))
        per = [keep[l][rows][:, cols].mean(0) for l in layers_of(fam, c)]
        a = torch.stack(per).mean(0).double()
        if c.name == 'ugaa':
            if a.sum() == 0: cert = 1.0
            else:
                pr = a / a.sum()
                cert = 1 + float((pr[pr > 0] * pr[pr > 0].log()).sum()) / math.log(len(a))
        else: cert = min(1.0, float(a.mean()) / (p['scale'] / len(a)))
        return float(p['beta']) * (1 - min(max(cert, 0.0), 1.0))
    ls = layers_of(fam, c)
    if c.name == 'pai': edit = dict(kind='pai', layers=ls, alpha=p['alpha'])
    elif c.name == 'vaf': edit = dict(kind='vaf', layers=ls, e=p['enhance'], u=p['suppress'])
    else:
        conf = math.exp(float(z.max()) - float(torch.logsumexp(z, -1)))
        edit = dict(kind='adaptvis', layers=ls, w=p['w_low'] if conf < p['threshold'] else p['w_high'])
    z0, z1 = forward(fam, inp, img=pos), forward(fam, inp, img=pos, edit=edit)
    tau = margin(z0, rid) - margin(z1, rid)
    if c.name == 'pai':
        text = ids.tolist()
        with torch.no_grad(): zt = fam.text_model()(input_ids=torch.tensor([text[:int(pos.min())] + text[int(pos.max()) + 1:]])).logits[0, -1].float()
        tau += contrast_tau(z1, zt, rid, float(p['gamma']), p['apc_beta'])[0]
    return tau


def raw(out): return [json.loads(l) for l in (out/'records.jsonl').read_text().splitlines()]


def check_against_direct(fam, out, imgs, specs):
    corr, seen, n = make_corrections(specs), {}, 0
    for r in raw(out):
        key = (r['image'], r['question'])
        if key not in seen:
            img = Image.open(imgs/r['image']).convert('RGB')
            with torch.no_grad(): z = fam.model(**fam.full_inputs(img, r['question'])).logits[0, -1].float()
            seen[key] = margin(z, fam.readout_ids), {c.label: direct_tau(fam, c, img, r['question'], z) for c in corr}
        d, taus = seen[key]
        for c in corr:
            got = r['corrections'][c.label]
            assert abs(got['tau'] - taus[c.label]) < 1e-4, (c.label, r['question'], got['tau'], taus[c.label])
            assert (got['delta'] - got['tau'] > 0) == (d - taus[c.label] > 0), (c.label, r['question'])
            n += 1
    return n


def few(pope, n_images=2, per_split=4):
    return pope[pope.image.isin(pope.image.unique()[:n_images])].groupby('split').head(per_split).reset_index(drop=True)


@pytest.mark.parametrize('family', ['llava15', 'instructblip'])     # Qwen2-VL: trained, below (stand-in images give it 400 image tokens)
def test_runner_matches_direct_implementation(tiny_dirs, pope, tmp_path, family):
    qs = few(pope, 1, 4)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    out = run(str(tiny_dirs[family]), qs, imgs, tmp_path/'run', batch_size=3, max_new_tokens=1, progress=False, corrections=SPECS)
    assert check_against_direct(load_adapter(str(tiny_dirs[family])), out, imgs, SPECS) == len(qs) * len(SPECS)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "The trained tiny LLaVA-1.5 on 6 scenes of the built-in benchmark: every grounding method, its identities and defects."
    from conftest import run_trained
    specs = ['ugaa', 'ugaa-magnitude', 'pai', 'vaf', 'adaptvis', 'ugaa:window=anchor', 'ugaa:rows=bos',
             'pai:alpha=0,gamma=1', 'pai:alpha=0', 'vaf:enhance=1,suppress=1', 'adaptvis:w_high=1,w_low=1', 'ugaa:beta=0', 'ugaa-magnitude:beta=0']
    return (*run_trained(tmp_path_factory.mktemp('trained'), specs, n_images=6), specs)


def test_trained_matches_direct_implementation(trained):
    fam, out, imgs, _ = trained
    check_against_direct(fam, out, imgs, ['ugaa', 'pai', 'vaf', 'adaptvis'])


def test_closed_forms_are_the_baseline(trained):
    _, out, _, _ = trained
    for r in raw(out):
        c = r['corrections']
        for l in ('pai:alpha=0,gamma=1', 'vaf:enhance=1,suppress=1', 'adaptvis:w_high=1,w_low=1', 'ugaa:beta=0', 'ugaa-magnitude:beta=0'):
            assert c[l]['tau'] == 0.0 and c[l]['delta'] == c['pai']['delta'], l
        assert c['ugaa:rows=bos']['tau'] == 0.0 and c['ugaa:rows=bos']['certainty'] == 1.0     # the BOS row reads nothing
        assert c['pai:alpha=0']['shift'] == 0.0                    # α = 0: the refinement alone
        assert 0 <= c['ugaa']['tau'] <= 1 and 0 <= c['ugaa-magnitude']['tau'] <= 1    # τ ∈ [0, β]


def test_noop_flag_fires_on_the_defect_only(trained):
    from pope_audit.benchmarks.scoring import read_records
    from pope_audit.corrections.methods import controls
    _, out, _, specs = trained
    tab = controls(read_records(out))
    noop = tab.groupby('readout').noop.agg(lambda s: set(s))
    acting = ['ugaa', 'ugaa-magnitude', 'pai', 'vaf', 'adaptvis', 'ugaa:window=anchor', 'pai:alpha=0']
    assert noop['ugaa:rows=bos'] == {'zero'}
    assert all(noop[l] == {''} for l in acting), noop
    recs = read_records(out)
    for l in acting: assert np.std([r.corrections[l]['tau'] for r in recs]) > 1e-3, l
    # the anchor's window differs from the image's own
    assert any(abs(r.corrections['ugaa:window=anchor']['tau'] - r.corrections['ugaa']['tau']) > 1e-3 for r in recs)


def test_parameters_refused():
    from pope_audit.foundation.core import InputError
    for spec, msg in [('vaf:start=0.5,end=0.5', '0 ≤ start < end ≤ 1'), ('pai:alpha=-1', 'alpha must be ≥ 0'), ('pai:gamma=0.5', 'gamma must be ≥ 1'),
                      ('ugaa:rows=cls', "rows is 'spatial' or 'bos'"), ('ugaa:window=x', "window is 'image' or 'anchor'"),
                      ('adaptvis:w_low=x', 'w_low must be a number'), ('ugaa:beta=-1', 'beta must be a number ≥ 0')]:
        with pytest.raises(InputError, match=msg.replace('(', r'\(').replace(')', r'\)')): make_corrections([spec])


@pytest.mark.parametrize('family', ['instructblip', pytest.param('qwen2-vl', marks=pytest.mark.slow)])   # Qwen2-VL: 13 s of CPU, run by CI (POPE_AUDIT_SLOW=1)
def test_trained_families_match_direct_implementation(tmp_path, family):
    "The trained tiny InstructBLIP (image first, no shared prefix) and Qwen2-VL, where the methods' effects are large."
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    qs, imgs = synthetic_benchmark(tmp_path/'bench', n_images=6, seed=11)
    qs = qs[qs.image.isin(qs.image.unique()[:2])].reset_index(drop=True)
    specs = ['ugaa', 'pai', 'vaf', 'adaptvis', 'vaf:end=1,enhance=1.5,start=0']
    out = run(str(tiny_vlm_dir(family)), qs, imgs, tmp_path/'run', batch_size=4, max_new_tokens=1, progress=False, corrections=specs)
    fam = load_adapter(str(tiny_vlm_dir(family)))
    assert check_against_direct(fam, out, imgs, specs) == len(qs) * len(specs)
    assert max(abs(r['corrections']['vaf:end=1,enhance=1.5,start=0']['tau']) for r in raw(out)) > 1e-2     # large enough to test


def test_command_line_runs_all_nine(tmp_path):
    "`pope-audit run --correction NAME` for every registered name on the trained tiny LLaVA-1.5, then `report` with the controls."
    import subprocess, sys
    from pope_audit.corrections.methods import CORRECTIONS, load_methods
    from pope_audit.benchmarks.builder import write_pope
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    load_methods()
    names = list(CORRECTIONS)
    assert sorted(names) == sorted(['vcd', 'icd', 'vdd', 'pai', 'vaf', 'adaptvis', 'ugaa', 'ugaa-magnitude', 'clip-certainty'])   # (registry order: import order)
    qs, imgs = synthetic_benchmark(tmp_path/'bench', n_images=6, seed=11)
    write_pope(qs, tmp_path/'q', prefix='syn_pope')
    cli = [sys.executable, '-m', 'pope_audit.interface.cli']
    cmd = cli + ['run', '--model', str(tiny_vlm_dir()), '--questions', str(tmp_path/'q'), '--images', str(imgs), '--limit', '4',
                 '--batch-size', '4', '--max-new-tokens', '1', '--out', str(tmp_path/'run')] + [a for n in names for a in ('--correction', n)]
    subprocess.run(cmd, check=True, capture_output=True)
    man = json.loads((tmp_path/'run'/'manifest.json').read_text())
    assert [c['label'] for c in man['identity']['corrections']] == names and set(man['timing']['corrections']) == set(names)
    recs = raw(tmp_path/'run')
    assert len(recs) == 12 and all(set(r['corrections']) == set(names) for r in recs)
    r = subprocess.run(cli + ['report', str(tmp_path/'run')], check=True, capture_output=True, text=True)
    html = (tmp_path/'run'/'report.html').read_text()
    assert all(n in html for n in names)


@pytest.mark.slow      # 30 s of CPU; LLaVA-1.5 and InstructBLIP against the direct implementation stay in the default suite; CI runs it (POPE_AUDIT_SLOW=1)
def test_llava_next_and_mplug_owl2_match_direct_implementation(shared, tiny_dirs, pope, tmp_path):
    "The two remaining families: LLaVA-NeXT (tiles and a newline token) and the package's own mPLUG-Owl2 port."
    from test_mplug_owl2 import tiny_family
    qs = few(pope, 1, 2)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    specs = ['ugaa', 'ugaa:rows=bos', 'pai', 'vaf:end=1,enhance=1.5,start=0', 'adaptvis']
    for name, fam in [('llava-next', load_adapter(str(tiny_dirs['llava-next']))), ('mplug-owl2', tiny_family(shared))]:
        out = run(fam, qs, imgs, tmp_path/name, batch_size=3, max_new_tokens=1, progress=False, corrections=specs)
        assert check_against_direct(fam, out, imgs, specs) == len(qs) * len(specs), name
