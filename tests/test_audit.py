"The audit table: transferred ids checked before anything runs, several families on one question set, resumable runs, run folders added as they are."
import json
import pandas as pd
import pytest
from pope_audit.interface.audit import audit, model_probe, transfer_check, transfer_warnings, audit_table, AUDIT_READOUTS
from pope_audit.foundation.core import InputError


def test_transfer_predicted_from_config_and_processor(tiny_dirs):
    "The check needs no weights: it reads the tokenizer and template, and names what the LLaVA ids are in each vocabulary."
    rows = {f: transfer_check(*model_probe(str(tiny_dirs[f])), f) for f in ('llava15', 'qwen2-vl', 'instructblip')}
    verdict = {f: r.groupby('readout').set_verdict.first().to_dict() for f, r in rows.items()}
    assert verdict['llava15'] == {'two_token': 'excluded', 'eight_token': 'transfers'}
    assert verdict['qwen2-vl'] == {'two_token': 'unrelated', 'eight_token': 'unrelated'}
    q = rows['qwen2-vl'].query('readout == "two_token"').set_index('id')
    assert q.loc[3582, 'verdict'] == 'not a yes/no token in this vocabulary' and q.loc[3582, 'text'] not in ('yes', 'Yes', ' yes', ' Yes')
    w = transfer_warnings(pd.concat(rows.values()))
    assert any(l.startswith('warning: qwen2-vl: eight_token') and 'unrelated' in l for l in w)
    assert not any(l.startswith('warning: llava15: eight_token') for l in w)


def test_audit_two_families_resumable(tiny_dirs, bench, tmp_path, capsys):
    qs, imgs = bench
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    models = {'llava': str(tiny_vlm_dir('llava15')), 'qwen': str(tiny_dirs['qwen2-vl'])}
    t = audit(tmp_path/'a', models, questions=qs, images=imgs, limit=4, max_new_tokens=3)
    out, err = capsys.readouterr()
    assert 'warning: qwen: two_token' in err and 'warning: llava: two_token' in err and 'excluded' in err
    assert err.index('warning: qwen') < err.index('running llava')          # warned before anything ran
    assert '| llava | adversarial |' in out and 'Every row used the same question set.' in out
    csv = pd.read_csv(tmp_path/'a'/'audit.csv')
    assert {'model', 'split', 'readout', 'f1', 'yes_rate', 'precision', 'questions', 'greedy_seen', 'transfer'} <= set(csv.columns)
    assert len(csv) == 2 * 3 * len(AUDIT_READOUTS) and set(csv.precision) == {'float32'}
    assert csv.groupby('split').questions.nunique().max() == 1
    assert (tmp_path/'a'/'audit.png').stat().st_size > 1000
    recs = (tmp_path/'a'/'runs'/'qwen'/'records.jsonl').read_text()
    assert len(recs.splitlines()) == 12
    # a second call resumes: nothing is re-run, the table is identical
    t2 = audit(tmp_path/'a', models, questions=qs, images=imgs, limit=4, max_new_tokens=3, quiet=True)
    assert (tmp_path/'a'/'runs'/'qwen'/'records.jsonl').read_text() == recs
    pd.testing.assert_frame_equal(t, t2)
    # run folders join as they are, and a different question set is flagged
    qs2 = qs[qs.split == 'random'].iloc[4:8]
    audit(tmp_path/'b', {'other': models['llava']}, questions=qs2, images=imgs, max_new_tokens=3, quiet=True)
    t3 = audit(tmp_path/'c', runs=[tmp_path/'a'/'runs'/'llava', tmp_path/'b'/'runs'/'other'], quiet=True)
    assert set(t3.model) == {'llava', 'other'}
    assert 'did not all use the same question set' in (tmp_path/'c'/'audit.md').read_text()


def test_audit_refuses(tmp_path):
    with pytest.raises(InputError, match='nothing to audit'): audit(tmp_path)
    with pytest.raises(InputError, match='not a run folder'): audit_table([tmp_path])
    with pytest.raises(InputError, match='no questions for the models to answer'): audit(tmp_path, models=['/nonexistent/model'])


def test_audit_command(tiny_dirs, bench, tmp_path, capsys):
    "`pope-audit audit`: models run from question files, run folders read as they are, JSON, exit 2 on bad input, --demo (the trained Qwen2-VL shows the transfer failure)."
    from pope_audit.interface.cli import main
    from pope_audit.models.tinyvlm import tiny_vlm_dir
    qs, imgs = bench
    main(['audit', '--models', f'llava={tiny_vlm_dir("llava15")}', f'qwen={tiny_dirs["qwen2-vl"]}', '--questions', imgs.parent/'synthetic_pope_random.json',
          '--images', imgs, '--limit', '3', '--max-new-tokens', '2', '--out', tmp_path/'a'])
    out, err = capsys.readouterr()
    assert 'warning: qwen: eight_token' in err and '| llava | random |' in out and '| qwen | random |' in out
    main(['audit', tmp_path/'a'/'runs'/'llava', '--out', tmp_path/'b', '--json'])
    rows = json.loads(capsys.readouterr().out)
    assert {r['model'] for r in rows} == {'llava'} and {r['readout'] for r in rows} == set(AUDIT_READOUTS)
    with pytest.raises(SystemExit) as e: main(['audit', '--out', tmp_path/'c'])
    assert e.value.code == 2 and 'nothing to audit' in capsys.readouterr().err
    main(['audit', '--demo', '--demo-images', '10', '--out', tmp_path/'demo'])
    out, err = capsys.readouterr()
    assert {'audit.csv', 'audit.md', 'audit.png', 'transfer.csv'} <= {p.name for p in (tmp_path/'demo').iterdir()}
    assert 'warning: tiny-llava15: two_token' in err and '| tiny-llava15 | adversarial |' in out
    assert '| smollm2-real | adversarial |' in out and 'Real pretrained weights: smollm2-real (HuggingFaceTB/SmolLM2-135M-Instruct' in out
    q = pd.read_csv(tmp_path/'demo'/'audit.csv').query("model == 'tiny-qwen2-vl'").pivot(index='split', columns='readout', values=['f1', 'yes_rate'])
    # the trained tiny Qwen2-VL as the paper's Qwen2-VL-7B: LLaVA's two ids say yes to everything (F1 0.6667), its eight ids
    # give F1 0 (measured 0.0000 on every split of these 60 questions), the model's own ids above 0.8 (measured 0.84-0.88)
    assert (q.yes_rate.two_token == 1).all() and (q.f1.two_token.round(4) == 0.6667).all()
    assert (q.f1.eight_token < 0.05).all() and (q.f1.derived > 0.8).all()
