"""Corrections (nbs/corrections/15_corrections): the runner's cached, batched path against a direct implementation written here —
one full forward per question, no cache, the contrast and the plausibility constraint computed id by id — plus the
closed forms, the effect on the trained tiny VLM, refusals and resume."""
import copy, json, math
import numpy as np
import pytest, torch
from PIL import Image
from pope_audit.foundation.core import InputError
from pope_audit.running.inference import run
from pope_audit.models.adapters import load_adapter
from pope_audit.foundation.tokens import Template
from pope_audit.models.tiny import stand_in_images
from pope_audit.corrections.methods import DISTURBANCES, diffusion_noise, make_corrections

torch.set_num_threads(1)       # tiny models: one thread is faster than a contended pool
SPECS = ['vcd', 'icd', 'vdd', 'vdd:mode=debias', 'vcd:apc_beta=none', 'icd:alpha=0.5,apc_beta=0.2,disturbance=2',
         'vdd:apc_beta=0.5,alpha=2']


def raw(out): return [json.loads(l) for l in (out/'records.jsonl').read_text().splitlines()]


@torch.no_grad()
def last(model, **inputs): return model(**inputs).logits[0, -1].float()


def direct_branch(fam, c, img, name, q):
    "The counterfactual's logits from one full forward of the whole prompt, built here from the method's definition."
    p = c.params
    if c.name == 'vcd':
        inp = fam.full_inputs(img, q)
        inp['pixel_values'] = diffusion_noise(inp['pixel_values'], p['noise_step'], p['seed'], name)
        return last(fam.model, **inp)
    if c.name == 'icd':
        d = DISTURBANCES[p['disturbance'] - 1] if isinstance(p['disturbance'], int) else p['disturbance']
        f = copy.copy(fam)
        f.template = Template('disturbed', d + ' ' + fam.template.text, fam.template.answer_sep)
        return last(f.model, **f.full_inputs(img, q))
    ids = fam.full_inputs(img, q)['input_ids'][0].tolist()
    img_pos = [i for i, t in enumerate(ids) if t == fam.image_token_id]
    mid = [fam.tokenizer.unk_token_id] if p['counterfactual'] == 'unk' else []
    return last(fam.text_model(), input_ids=torch.tensor([ids[:img_pos[0]] + mid + ids[img_pos[-1] + 1:]]))


def direct_quantities(z, zc, ids, c):
    "Δ, τ and the freeze flag, id by id on Python floats."
    z, zc, Y, N = z.tolist(), zc.tolist(), ids['yes'], ids['no']
    delta = max(z[i] for i in Y) - max(z[i] for i in N)
    dcf = max(zc[i] for i in Y) - max(zc[i] for i in N)
    if c.params.get('mode') == 'debias': return delta, dcf, False
    a, b = float(c.params['alpha']), c.params['apc_beta']
    comb = [(1 + a) * x - a * y for x, y in zip(z, zc)]                 # the whole vocabulary first
    thr = max(z) + math.log(b) if b is not None else -math.inf
    kY, kN = [i for i in Y if z[i] >= thr], [i for i in N if z[i] >= thr]
    if not kY or not kN: return delta, 0.0, True
    return delta, delta - (max(comb[i] for i in kY) - max(comb[i] for i in kN)) / (1 + a), False


def check_against_direct(fam, out, imgs, specs):
    corr, seen, n = make_corrections(specs), {}, 0
    for r in raw(out):
        img = Image.open(imgs/r['image']).convert('RGB')
        key = (r['image'], r['question'])
        if key not in seen:
            z = last(fam.model, **fam.full_inputs(img, r['question']))
            seen[key] = {c.label: direct_quantities(z, direct_branch(fam, c, img, r['image'], r['question']), fam.readout_ids, c) for c in corr}
        for c in corr:
            got, (delta, tau, frozen) = r['corrections'][c.label], seen[key][c.label]
            assert abs(got['delta'] - delta) < 1e-4 and abs(got['tau'] - tau) < 1e-4, (c.label, r['question'], got, tau)
            assert got['frozen'] == frozen and (got['delta'] - got['tau'] > 0) == (delta - tau > 0), (c.label, r['question'])
            n += 1
    return n


def few(pope, n_images=2, per_split=6):
    return pope[pope.image.isin(pope.image.unique()[:n_images])].groupby('split').head(per_split).reset_index(drop=True)


@pytest.mark.parametrize('family', ['llava15', *(pytest.param(f, marks=pytest.mark.slow) for f in ('llava-next', 'qwen2-vl')), 'instructblip'])   # 20 s of CPU each: CI runs them (POPE_AUDIT_SLOW=1)
def test_runner_matches_direct_implementation(tiny_dirs, pope, tmp_path, family):
    qs = few(pope)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    out = run(str(tiny_dirs[family]), qs, imgs, tmp_path/'run', batch_size=4, max_new_tokens=1, progress=False, corrections=SPECS)
    n = check_against_direct(load_adapter(str(tiny_dirs[family])), out, imgs, SPECS)
    assert n == len(qs) * len(SPECS)


def test_mplug_owl2_matches_direct_implementation(shared, pope, tmp_path):
    from test_mplug_owl2 import tiny_family
    fam = tiny_family(shared)
    qs = few(pope, 1, 6)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    out = run(fam, qs, imgs, tmp_path/'run', batch_size=4, max_new_tokens=1, progress=False, corrections=SPECS)
    assert check_against_direct(fam, out, imgs, SPECS) == len(qs) * len(SPECS)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    "The trained tiny LLaVA-1.5 on 8 scenes of the built-in benchmark, with every method, its closed forms and α = 0."
    from conftest import run_trained
    specs = ['vcd', 'icd', 'vdd', 'vdd:mode=debias', 'vcd:apc_beta=none', 'icd:apc_beta=none', 'vdd:apc_beta=none',
             'vcd:alpha=0', 'icd:alpha=0', 'vdd:alpha=0', 'vdd:counterfactual=unk']
    return (*run_trained(tmp_path_factory.mktemp('trained'), specs, n_images=8), specs)


def test_trained_matches_direct_implementation(trained):
    fam, out, imgs, specs = trained
    check_against_direct(fam, out, imgs, ['vcd', 'icd', 'vdd:apc_beta=none', 'vdd:counterfactual=unk'])


def test_closed_forms(trained):
    fam, out, imgs, _ = trained
    recs, agree = raw(out), 0
    for r in recs:
        c, delta = r['corrections'], r['corrections']['vcd']['delta']
        for m in ('vcd', 'icd', 'vdd'):                    # α = 0 is the baseline exactly
            assert c[f'{m}:alpha=0']['tau'] == 0.0 and c[f'{m}:alpha=0']['delta'] == delta
        assert c['vdd:mode=debias']['tau'] == c['vdd:mode=debias']['delta_cf']       # post-hoc debias: τ = Δ_cf
        v = c['vcd:apc_beta=none']
        lg = {int(k): x for k, x in r['logits'].items()}
        same = max(fam.readout_ids['yes'], key=lg.get), max(fam.readout_ids['no'], key=lg.get)
        img = Image.open(imgs/r['image']).convert('RGB')
        zc = direct_branch(fam, make_corrections(['vcd'])[0], img, r['image'], r['question'])
        if same == (max(fam.readout_ids['yes'], key=lambda i: zc[i]), max(fam.readout_ids['no'], key=lambda i: zc[i])):
            assert abs(v['tau'] - v['delta_cf'] / 2) < 1e-5          # VCD at α = 1, no constraint: τ = Δ_noised / 2
            agree += 1
        if agree >= 12: break
    assert agree >= 6
    # the image-free pass of debias is the same branch as VDD's
    assert all(abs(r['corrections']['vdd:mode=debias']['delta_cf'] - r['corrections']['vdd']['delta_cf']) < 1e-6 for r in recs)


def test_each_method_acts_on_the_trained_model(trained):
    from pope_audit.benchmarks.scoring import read_records
    from pope_audit.corrections.methods import controls
    _, out, _, specs = trained
    recs = read_records(out)
    tab = controls(recs, json.loads((out/'manifest.json').read_text())['timing'])
    for l in ['vcd', 'icd', 'vdd', 'vdd:mode=debias', 'vcd:apc_beta=none', 'icd:apc_beta=none', 'vdd:apc_beta=none']:
        taus = np.array([r.corrections[l]['tau'] for r in recs])
        assert taus.std() > 1e-3, l
        assert (tab[tab.readout == l].noop == '').all(), l
    for m in ('vcd', 'icd', 'vdd'): assert (tab[tab.readout == f'{m}:alpha=0'].noop == 'zero').all()
    assert set(tab.readout) == {'baseline', 'yes_push', *specs}
    assert (tab[tab.readout == 'vdd:counterfactual=unk'].noop == '').all()
    assert (tab[tab.readout == 'vcd'].cost > 1).all() and (tab[tab.readout == 'baseline'].cost == 1).all()


def test_refused_for_a_family_without_the_part(tiny_dirs, pope, tmp_path):
    fam = load_adapter(str(tiny_dirs['llava15']))
    vision = fam.image_inputs
    fam.image_inputs = lambda image: ({'image_embeds': torch.zeros(1, 4)}, vision(image)[1])    # a family with no pixel tensor
    qs = few(pope, 1, 2)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    with pytest.raises(InputError, match="vcd needs the image's preprocessed pixel tensor, to distort; the llava15 family gives none"):
        run(fam, qs, imgs, tmp_path/'run', progress=False, corrections=['vcd'])
    assert not (tmp_path/'run'/'manifest.json').exists()
    with pytest.raises(InputError, match="unknown correction 'pia'"):
        run(fam, qs, imgs, tmp_path/'run2', progress=False, corrections=['pia'])
    assert not (tmp_path/'run2').exists()
    qwen = load_adapter(str(tiny_dirs['qwen2-vl']))                       # a tokenizer without <unk>
    with pytest.raises(InputError, match='vdd: counterfactual=unk needs an <unk> token; the qwen2-vl tokenizer has none'):
        run(qwen, qs, imgs, tmp_path/'run3', progress=False, corrections=['vdd:counterfactual=unk'])
    assert not (tmp_path/'run3'/'manifest.json').exists()


def test_resume_and_identity_cover_corrections(tiny_dirs, pope, tmp_path):
    qs = few(pope, 2, 6)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    kw = dict(batch_size=4, max_new_tokens=1, progress=False, corrections=['vcd', 'vdd:mode=debias'])
    whole = run(str(tiny_dirs['llava15']), qs, imgs, tmp_path/'whole', **kw)
    lines = (whole/'records.jsonl').read_text().splitlines(keepends=True)
    part = tmp_path/'part'; part.mkdir()
    (part/'manifest.json').write_text((whole/'manifest.json').read_text())
    (part/'records.jsonl').write_text(''.join(lines[:5]) + lines[5][:40])
    run(str(tiny_dirs['llava15']), qs, imgs, part, **kw)
    key = lambda d: (d['split'], d['question_id'])
    assert sorted(raw(part), key=key) == sorted(raw(whole), key=key)
    t = json.loads((part/'manifest.json').read_text())['timing']
    assert t['baseline_s'] > 0 and set(t['corrections']) == {'vcd', 'vdd:mode=debias'}
    with pytest.raises(InputError, match='corrections: '):
        run(str(tiny_dirs['llava15']), qs, imgs, part, **{**kw, 'corrections': ['vcd:noise_step=900', 'vdd:mode=debias']})


def test_command_line(shared, tiny_dirs, pope, tmp_path):
    import subprocess, sys
    cli = [sys.executable, '-c', 'from pope_audit.interface.cli import main; main()']
    qs = few(pope, 1, 6)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    base = ['run', '--model', str(tiny_dirs['llava15']), '--questions', str(shared/'data/pope/coco'), '--images', str(imgs),
            '--limit', '6', '--batch-size', '4', '--max-new-tokens', '1', '--out', str(tmp_path/'run')]
    subprocess.run(cli + base + ['--correction', 'vcd', '--correction', 'vdd:mode=debias'], check=True, capture_output=True)
    man = json.loads((tmp_path/'run'/'manifest.json').read_text())
    assert [c['label'] for c in man['identity']['corrections']] == ['vcd', 'vdd:mode=debias']
    r = subprocess.run(cli + ['score', str(tmp_path/'run')], capture_output=True, text=True, check=True)
    assert 'vcd' in r.stdout and 'vdd:mode=debias' in r.stdout          # each correction scored as a readout beside the baseline
    r = subprocess.run(cli + ['report', str(tmp_path/'run')], capture_output=True, text=True, check=True)
    assert 'Corrections against the baseline' in (tmp_path/'run'/'report.md').read_text()
    r = subprocess.run(cli + base[:-1] + [str(tmp_path/'bad'), '--correction', 'vcd:alpha=x'], capture_output=True, text=True)
    assert r.returncode == 2 and 'vcd: alpha must be a number' in r.stderr
