"A run whose questions and images come from a dataset with the lmms-lab/POPE schema, then rescoring it."
from PIL import Image
from pope_audit.foundation.data import hf_pope_like, read_hf_pope
from pope_audit.running.inference import run
from pope_audit.benchmarks.scoring import read_records, score_records
from pope_audit.models.tiny import stand_in_image
from pope_audit.interface.cli import main


def test_run_from_hf_dataset(pope, tiny_dirs, tmp_path, capsys):
    sub = pope[pope.image.isin(pope.image.unique()[:2])].groupby('split').head(6).reset_index(drop=True)
    ds = hf_pope_like(sub, {n: stand_in_image(n) for n in sub.image.unique()})
    ds.save_to_disk(str(tmp_path/'pope_hf'))
    main(['run', '--model', str(tiny_dirs['qwen2-vl']), '--questions', f'hf:{tmp_path/"pope_hf"}', '--out', str(tmp_path/'run'),
          '--batch-size', '3', '--max-new-tokens', '2'])
    recs = read_records(tmp_path/'run')
    assert sorted(r.key for r in recs) == sorted(zip(sub.split, sub.question_id))
    assert recs[0].derived == {'yes': [9454, 9693], 'no': [2152, 2753]}
    capsys.readouterr()
    main(['score', str(tmp_path/'run')])
    out = capsys.readouterr().out
    assert 'derived' in out and 'two_token' in out and 'unknown version' in out
