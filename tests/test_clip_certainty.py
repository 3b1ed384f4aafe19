"The clip-certainty correction: noun, crops, the shipped tiny CLIP, τ = β(1 − c) computed independently, and a run through the runner."
import json, math
from pathlib import Path
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
import pope_audit.corrections.clip_certainty as cc
from pope_audit.foundation.core import InputError, sha256_file
from pope_audit.corrections.methods import parse_correction

torch.set_num_threads(1)


def test_noun():
    qs = {'Is there a dining table in the image?': 'dining table', 'Is there an apple in the image?': 'apple',
          'Is there an elephant in the image?': 'elephant', 'is there a Traffic light in the image': 'Traffic light',
          'Is there a star in the image?': 'star', 'What is on the table?': 'table', 'Is there anything in the image?': 'image'}
    assert {q: cc.object_noun(q) for q in qs} == qs


def test_crops():
    assert cc.crop_boxes((64, 64))[:2] == [(0, 0, 16, 16), (16, 0, 32, 16)]
    assert cc.crop_boxes((64, 64))[-2:] == [(48, 48, 64, 64), (0, 0, 64, 64)]
    b = cc.crop_boxes((10, 7), 3)
    assert len(b) == 10 and sum((r - l) * (d - t) for l, t, r, d in b[:-1]) == 70     # the cells tile the picture
    pic = Image.fromarray(np.random.default_rng(0).integers(0, 256, (48, 80, 3), dtype=np.uint8))
    cs = cc.crops(pic, 4)
    assert len(cs) == 17 and cs[-1].size == (80, 48) and cs[0].size == (20, 12)
    assert np.array_equal(np.asarray(cs[5]), np.asarray(pic)[12:24, 20:40])


def test_shipped_weights():
    d = cc.tiny_clip_dir()
    info = json.loads((d/'training.json').read_text())
    assert sha256_file(d/'model.safetensors') == info['weights_sha256']
    assert sum(p.stat().st_size for p in d.iterdir()) < 2 * 2**20
    assert info['seed'] != info['heldout_seed'] and info['k'] > 0


def test_heldout_auroc():
    s = cc.load_clip('tiny')
    cal = cc.calibrate(cc.heldout_max_cos(s, 100, seed=11))
    assert cal['auroc'] > 0.97, cal          # measured 0.990
    info = json.loads((cc.tiny_clip_dir()/'training.json').read_text())
    assert math.isclose(cal['c0'], info['c0'], abs_tol=1e-5) and (s.k, s.c0) == (info['k'], info['c0'])


def test_params_and_model_choice(tmp_path):
    assert parse_correction('clip-certainty').params == dict(beta=1.0, model='auto', k=None, c0=None, grid=4)
    for bad, msg in [('beta=-0.5', 'beta must be'), ('k=-1', 'k must be'), ('grid=2.5', 'grid must be'), ('model=', 'model is auto')]:
        with pytest.raises(InputError, match=msg): parse_correction(f'clip-certainty:{bad}')
    with pytest.raises(InputError, match='cannot load CLIP'): cc.load_clip(str(tmp_path/'nothing-here'))
    class M: name_or_path = str(tmp_path)
    class Fam: model, name = M(), 'x'
    c = parse_correction('clip-certainty')
    assert not cc.is_tiny_vlm(Fam()) and c.source_for(Fam()) == 'openai/clip-vit-base-patch32'
    (tmp_path/'training.json').write_text(json.dumps(dict(weights_sha256='0' * 64)))      # a training.json is not enough
    assert not cc.is_tiny_vlm(Fam())
    tiny = json.loads((cc.ASSETS_ROOT/cc.TRAINED['qwen2-vl']/'training.json').read_text())['weights_sha256']
    (tmp_path/'training.json').write_text(json.dumps(dict(weights_sha256=tiny)))
    assert cc.is_tiny_vlm(Fam()) and c.source_for(Fam()) == 'tiny'


def test_local_folder_without_calibration(tmp_path):
    "A CLIP folder without a calibration (as a hub CLIP has none) takes the anchor's k = 20, c0 = 0.22."
    import shutil
    for f in cc.tiny_clip_dir().iterdir():
        if f.name != 'training.json': shutil.copy(f, tmp_path/f.name)
    s = cc.load_clip(str(tmp_path))
    assert (s.k, s.c0) == (None, None)
    c = parse_correction(f'clip-certainty:model={tmp_path}')
    class Fam: model, name, device = None, 'x', 'cpu'
    assert c.source_for(Fam()) == str(tmp_path) and c.constants(c.scorer(Fam())) == (20.0, 0.22)
    assert parse_correction(f'clip-certainty:model={tmp_path},k=5').constants(s) == (5.0, 0.22)


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
    from pope_audit.running.inference import run
    from pope_audit.benchmarks.scoring import read_records
    from pope_audit.benchmarks.synthetic import synthetic_benchmark
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    work = tmp_path_factory.mktemp('clip')
    qs, imgs = synthetic_benchmark(work/'bench', n_images=3, seed=2026)
    out = run(str(tiny_vlm_dir()), qs, imgs, work/'run', batch_size=8, max_new_tokens=1, progress=False,
              corrections=['clip-certainty', 'clip-certainty:beta=0', 'clip-certainty:beta=0.5,grid=2'])
    return read_records(out), imgs


def test_run_records(tiny_run):
    recs, _ = tiny_run
    assert len(recs) == 3 * 3 * 6
    for r in recs:
        q = r.corrections['clip-certainty']
        assert set(q) == {'delta', 'tau', 'tau_free', 'frozen', 'certainty'}
        assert q['frozen'] is False and q['tau_free'] == q['tau'] and 0 <= q['tau'] <= 1


def test_tau_is_beta_one_minus_c(tiny_run):
    "τ from the records against c recomputed straight from CLIPModel's text and image features."
    from transformers import CLIPModel, AutoTokenizer, AutoImageProcessor
    recs, imgs = tiny_run
    d = cc.tiny_clip_dir()
    info = json.loads((d/'training.json').read_text())
    model, tok = CLIPModel.from_pretrained(str(d)).eval(), AutoTokenizer.from_pretrained(str(d))
    proc = AutoImageProcessor.from_pretrained(str(d), backend='pil')
    def c(image, question, grid):
        with torch.no_grad():
            t = tok([question.split(' a ', 1)[1].split(' in the image')[0]], return_tensors='pt')   # the noun, read another way
            te = F.normalize(model.get_text_features(**t).pooler_output, dim=-1)
            pic = Image.open(imgs/image).convert('RGB')
            W, H = pic.size
            boxes = [(W * j // grid, H * i // grid, W * (j + 1) // grid, H * (i + 1) // grid) for i in range(grid) for j in range(grid)] + [(0, 0, W, H)]
            ie = F.normalize(model.get_image_features(pixel_values=proc(images=[pic.crop(b) for b in boxes], return_tensors='pt')['pixel_values']).pooler_output, dim=-1)
            return torch.sigmoid(info['k'] * ((te @ ie.T).max() - info['c0'])).item()
    for r in recs[::5]:
        c4 = c(r.image, r.question, 4)
        assert abs(r.corrections['clip-certainty']['tau'] - (1 - c4)) < 1e-6
        assert abs(r.corrections['clip-certainty']['certainty'] - c4) < 1e-6
        assert abs(r.corrections['clip-certainty:beta=0.5,grid=2']['tau'] - 0.5 * (1 - c(r.image, r.question, 2))) < 1e-6


def test_beta_zero_is_the_baseline(tiny_run):
    from pope_audit.foundation.readouts import READOUTS
    recs, _ = tiny_run
    assert all(r.corrections['clip-certainty:beta=0']['tau'] == 0.0 for r in recs)
    assert all(r.corrections['clip-certainty:beta=0']['delta'] == r.corrections['clip-certainty']['delta'] for r in recs)
    assert [READOUTS['clip-certainty:beta=0'](r) for r in recs] == [READOUTS['derived'](r) for r in recs]
    moved = [(READOUTS['derived'](r), READOUTS['clip-certainty'](r)) for r in recs]
    assert ('no', 'yes') not in moved           # τ ≥ 0: it can only push towards no
    assert max(r.corrections['clip-certainty']['tau'] for r in recs) > 0.5
