"The runner's cached, batched path against the paper's per-question `generate(max_new_tokens=1)`, on every family."
import pytest, torch
from pope_audit.running.inference import run, reference_logits
from pope_audit.models.adapters import load_adapter
from pope_audit.benchmarks.scoring import read_records
from pope_audit.foundation.readouts import Record, READOUTS
from pope_audit.models.tiny import stand_in_images


@pytest.mark.parametrize('family', ['llava15', 'llava-next', 'qwen2-vl', 'instructblip'])
def test_runner_matches_per_question_generate(tiny_dirs, pope, tmp_path, family):
    qs = pope[pope.image.isin(pope.image.unique()[:2])].groupby('split').head(6).reset_index(drop=True)
    imgs = stand_in_images(qs.image.unique(), tmp_path/'img')
    out = run(str(tiny_dirs[family]), qs, imgs, tmp_path/'run', batch_size=4, max_new_tokens=2, progress=False)
    recs = read_records(out)
    assert len(recs) == len(qs)
    a = load_adapter(str(tiny_dirs[family]))
    from PIL import Image
    for r in recs:
        ref = reference_logits(a, Image.open(imgs/r.image).convert('RGB'), r.question)
        assert r.greedy_id == int(ref.argmax())
        assert max(abs(v - float(ref[i])) for i, v in r.logits.items()) < 1e-4
        # the same decisions under every logit readout
        naive = Record(**{**r.__dict__, 'logits': {i: float(ref[i]) for i in r.logits}, 'greedy_id': int(ref.argmax())})
        for name, ro in READOUTS.items():
            if ro.needs != 'text' and ro.applies(r): assert ro(r) == ro(naive), (name, r.key)
