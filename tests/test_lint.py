"`pope-audit lint` on evaluation code written in the field's shapes, under the real LLaMA-2, Qwen2 and Gemma 3 vocabularies."
import json, shutil, subprocess, sys
from pathlib import Path
import pytest
import yaml
from pope_audit.interface.lint import BATTERY, lint, read_sources, scan, greedy_reading
from conftest import run_cli

FIX = Path(__file__).parent/'fixtures'/'lint'
PAT = FIX/'patterns'
ROOT = Path(__file__).parent.parent
SPACE = 'USER: <image>\n{question} ASSISTANT: '          # a LLaVA template that ends in a space


@pytest.fixture(scope='module')
def llama(shared):
    from pope_audit.foundation.tokens import shared_tokenizer
    return shared_tokenizer('llama-spm')


@pytest.fixture(scope='module')
def qwen(shared):
    from pope_audit.foundation.tokens import shared_tokenizer
    return shared_tokenizer('qwen2')


@pytest.fixture(scope='module')
def gemma(shared):
    from pope_audit.foundation.tokens import shared_tokenizer
    return shared_tokenizer('gemma-3')


def by_line(report, name):
    return {f.line: f for f in report.findings if Path(f.file).name == name}


def verdicts(report):
    return [(f.line, f.what, f.verdict) for f in report.findings]


# ids by data flow ------------------------------------------------------------------------------------------------

def test_paper_script_pattern(llama):
    "The paper's own shape: ids in constants of any name read from the scores; the 2-token pair excluded, the 8-token max derived."
    r = lint([PAT/'two_token_constants.py'], llama, 'llava15')
    assert verdicts(r) == [(12, 'logits[YES_2TOK[0]]', 'excluded'), (12, 'logits[NO_2TOK[0]]', 'excluded'), (13, 'logits[i]', 'derived'),
                           (14, 'logits[i]', 'derived'), (15, 'logits[YES]', 'excluded'), (15, 'logits[NO]', 'excluded'), (16, 'logits[i]', 'derived')]
    two = r.findings[0]
    assert (two.ids, two.spells) == ([3582], ['yes'])
    assert "3582 spells 'yes', but after '\\nASSISTANT:' the model starts 'yes' with 3869 ' Yes' or 4874 ' yes': 3582 never starts the answer" == two.detail
    assert two.fix == "use the derived ids (max over each set): yes 3869 ' Yes', 4874 ' yes'"
    assert r.exit_code() == 1


def test_renaming_the_constants_changes_nothing(llama, tmp_path):
    "The issue's report: renaming YES_2TOK to any name leaves the finding as it was (found by flow, not by name)."
    src = (PAT/'two_token_constants.py').read_text()
    (tmp_path/'renamed.py').write_text(src.replace('YES_2TOK', 'A').replace('NO_2TOK', 'B'))
    r = lint([tmp_path/'renamed.py'], llama, 'llava15')
    assert [(f.line, f.ids, f.verdict) for f in r.findings][:2] == [(12, [3582], 'excluded'), (12, [1217], 'excluded')]


def test_ids_carried_to_another_vocabulary(qwen):
    "LLaMA's ids read from a Qwen2 model's logits spell ' typ' and ' reg' there; the fix names Qwen2's own ids under its chat template."
    r = lint([PAT/'carried_ids.py', PAT/'two_token_constants.py'], qwen, 'qwen2-vl')
    carried = next(f for f in r.findings if f.file.endswith('carried_ids.py'))
    assert (carried.ids, carried.spells, carried.verdict) == ([3582], [' typ'], 'unrelated')
    assert carried.fix == "use the derived ids (max over each set): yes 9454 'Yes', 9693 'yes'"
    assert {f.verdict for f in r.findings} == {'unrelated'} and len(r.findings) == 9


def test_bos_first_lookup(llama, gemma, qwen):
    "encode(answer)[0] with the answer a default argument carried through a zip: the BOS on LLaMA (1) and Gemma (2); 'Yes' on Qwen2."
    got = [lint([PAT/'bos_first.py'], t, m).findings for t, m in [(llama, 'llava15'), (gemma, 'paligemma'), (qwen, 'qwen2-vl')]]
    assert [(f[0].line, f[0].ids, f[0].spells, f[0].verdict) for f in got] == [
        (18, [1], ['<s>'], 'special'), (18, [2], ['<bos>'], 'special'), (18, [9454], ['Yes'], 'derived')]
    assert 'a special token the tokenizer adds' in got[0][0].detail


def test_template_ending_in_a_space(llama):
    "The bare word looked up per Enum member: ' Yes'/' No' after 'ASSISTANT:', but after a trailing space no yes/no form is one token."
    r = lint([PAT/'enum_lookup.py'], llama, SPACE)
    f, = r.findings
    assert (f.kind, f.ids, f.verdict) == ('lookup', [1939, 3869], 'excluded')
    assert 'no single token starts a' in f.detail and f.fix.startswith('no yes/no id can start the answer under this template')
    assert lint([PAT/'enum_lookup.py'], llama, 'llava15').findings[0].verdict == 'derived'


def test_derived_ids_by_data_flow(llama):
    "Helpers, defaults, a config dict, a class attribute, index_select/gather, BOS written in, logged forms: all followed, all derived."
    r = lint([PAT/n for n in ('derived_by_helper.py', 'bos_aware.py', 'logged_forms.py')], llama, 'llava15')
    got = {(Path(f.file).name, f.line, f.what): (f.ids, f.verdict) for f in r.findings}
    assert got[('derived_by_helper.py', 20, 'logits[..., yes]')] == ([3869, 4874], 'derived')
    assert got[('derived_by_helper.py', 24, 'logits[yes_id]')] == ([3869], 'derived')
    assert got[('derived_by_helper.py', 29, 'probs[:, CONFIG["yes_id"]]')] == ([3869], 'derived')
    assert got[('derived_by_helper.py', 39, 'logits.index_select(-1, self.yes_ids)')] == ([3869, 4874], 'derived')
    assert got[('derived_by_helper.py', 39, 'logits.gather(-1, self.no_ids)')] == ([1939, 694], 'derived')
    assert got[('bos_aware.py', 13, 'scores[yes_id]')] == ([3869], 'derived')
    assert got[('logged_forms.py', 15, 'output.scores[0][0][label_id[key]]')] == ([4874, 3869, 8241, 694, 1939, 3782], 'derived')
    assert {v for _, v in got.values()} == {'derived'} and r.exit_code() == 0


def test_ids_from_an_earlier_cell(llama):
    "Ids bound in one notebook cell and read in a later one: the readout is judged where it reads them, the binding not twice."
    r = lint([PAT/'earlier_cell.ipynb'], llama, 'llava15')
    assert [(f.cell, f.line, f.ids, f.verdict) for f in r.findings] == [(3, 3, [3582], 'excluded'), (3, 3, [1217], 'excluded')]
    assert r.findings[0].where.endswith('earlier_cell.ipynb:cell 3:3')


def test_an_id_source_lint_cannot_see(llama):
    "Ids from a helper outside the code given: cannot judge, naming the helper; never a guessed WRONG."
    r = lint([PAT/'unseen_ids.py'], llama, 'llava15')
    f, = r.findings
    assert f.verdict == 'suspect' and 'answer_token_ids() from vendor_tools' in f.detail
    assert (r.exit_code(), r.exit_code(strict=True)) == (0, 1)


def test_old_field_shapes(llama, qwen):
    "The chapter's first fixtures: the excluded pair, a greedy id compared, BOS lookups, a notebook, ids moved to Qwen2."
    r = lint([FIX/'field/two_token_logits.py', FIX/'field/encode_first.py', FIX/'field/eval_notebook.ipynb'], llama, 'llava15')
    two, enc = by_line(r, 'two_token_logits.py'), by_line(r, 'encode_first.py')
    assert [(two[n].ids, two[n].verdict) for n in (8, 9, 13)] == [([3582], 'excluded'), ([1217], 'excluded'), ([3869], 'derived')]
    assert [(enc[n].ids, enc[n].spells, enc[n].verdict) for n in (4, 9, 14)] == [([1], ['<s>'], 'special'), ([3869], [' Yes'], 'derived'), ([3582], ['yes'], 'excluded')]
    assert enc[17].verdict == 'suspect' and 'cfg.yes_word' in enc[17].detail
    assert [(f.cell, f.line, f.verdict) for f in r.findings if f.file.endswith('.ipynb')] == [(3, 2, 'special'), (3, 3, 'special')]
    q = lint([FIX/'field/transferred_ids.py'], qwen, 'llava15')
    assert [(f.line, f.spells, f.verdict) for f in q.findings][:2] == [(4, [' }}'], 'unrelated'), (5, ['?\n\n'], 'unrelated')]


def test_static_reading_needs_no_tokenizer():
    "Scanning finds the literal ids with no tokenizer at all; the ids only a tokenizer knows are left for judging."
    fs = scan(read_sources(PAT/'two_token_constants.py')[0])
    assert sorted((f.line, f.side, f.ids) for f in fs if not f.named)[:2] == [(12, 'no', {'no': [1217]}), (12, 'yes', {'yes': [3582]})]
    fs = scan(read_sources(PAT/'bos_first.py')[0])
    assert [(f.line, f.ids) for f in fs if f.kind == 'id'] == [(18, {})]


# parsers ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name, verdict, misread', [
    ('recorder.py', 'disagrees', {'Nope': 'yes', 'None': 'yes', 'Not sure': 'yes', 'I cannot tell': 'yes', 'Yes and no': 'no', '': 'yes'}),
    ('substring_anywhere.py', 'disagrees', {'Not sure': 'no', 'I cannot tell': 'no'}),
    ('mme_prefix.py', 'disagrees', {'Not sure': 'no'}),
    ('first_word_nested.py', 'agrees', {}),
])
def test_parser_misreadings(llama, name, verdict, misread):
    "Each parser's misread answers, modelled from its code: recorders, substrings, MME's prefix; a nested helper followed."
    f, = lint([PAT/name], llama, 'llava15').findings
    assert (f.verdict, {a: r for a, r, _ in f.misread}) == (verdict, misread)


def test_label_dependent_parsers(llama):
    "Exact match after lower().strip() and case-sensitive equality with 'Yes', both against the label: 'Yes.' is credited under neither label."
    r = lint([PAT/'exact_after_strip.py', PAT/'case_sensitive.py'], llama, 'llava15')
    assert [f.verdict for f in r.findings] == ['label-dependent', 'label-dependent']
    exact, case = r.findings
    assert exact.reading['Yes.'] == 'not credited' and exact.reading['yes'] == 'gold yes: credited; gold no: not credited'
    assert case.reading['Yes'] == 'gold yes: credited; gold no: not credited' and case.reading['yes'] == 'not credited'


def test_judge_reply_parser(llama):
    "A judge's reply read with 'correct' in it: 'Incorrect' and 'Not correct' read as correct; startswith('correct') misses none of those."
    loose, careful = lint([PAT/'judge_reply.py'], llama, 'llava15').findings
    assert {a: r for a, r, _ in loose.misread} == {'Incorrect': 'yes', 'incorrect.': 'yes', 'The answer is incorrect.': 'yes', 'Not correct': 'yes', '': 'no'}
    assert {a: r for a, r, _ in careful.misread} == {'The answer is correct.': 'no', '': 'no'}


def test_helper_in_the_package_is_followed(llama, tmp_path):
    "A sound parser calling a punctuation helper of its package agrees; read alone, lint cannot judge it and names the helper."
    r = lint([PAT/'helper_pkg'], llama, 'llava15')
    assert [(f.what, f.verdict) for f in r.findings] == [('def yes_no(…)', 'agrees')]
    shutil.copy(PAT/'helper_pkg/evalkit/scoring/yes_no.py', tmp_path/'yes_no.py')
    f, = lint([tmp_path], llama, 'llava15').findings
    assert f.verdict == 'suspect' and 'strip_punctuation() from evalkit' in f.detail


def test_judge_reply_behind_a_retry_loop(llama):
    "A judge asked over an API inside `while True`: what the request returns is the reply, read by the rule after the loop."
    ask, grade = lint([PAT/'judge_api_retry.py'], llama, 'llava15').findings
    assert {a: r for a, r, _ in ask.misread} == {'Yes.': 'unknown', 'Yes, there is a dog in the image.': 'unknown', 'No.': 'unknown'}
    assert {a: r for a, r, _ in grade.misread} == {'Not correct': 'yes'}          # verdict codes '1'/'0' read as the numbers they are
    assert '(yes|no)' in ask.fix and '(correct|incorrect)' in grade.fix              # a judge's verdict gets the verdict's fix


def test_helpers_through_star_imports(llama):
    "A helper reached through `from ..util import *` is followed; one in a star-imported module that is not there makes lint say it cannot judge."
    sound, loose = lint([PAT/'star_pkg/judgekit/scoring/yesno.py'], llama, 'llava15').findings
    assert (sound.what, sound.verdict) == ('def extract(…)', 'agrees')
    assert loose.verdict == 'suspect' and 'normalise() from .io (a star import)' in loose.detail


def test_lookup_over_several_words(llama):
    "true/false/yes/no looked up in one loop: only the yes/no ids are judged (' yes' 4874 and ' no' 694, the answer tokens after 'ASSISTANT:')."
    f, = lint([PAT/'word_list_lookup.py'], llama, 'llava15').findings
    assert (f.kind, f.verdict, f.ids) == ('lookup', 'derived', [4874, 694])


def test_settings_are_not_replies(llama):
    "A coercer that takes booleans, a question typed at the terminal, a ',none' suffix regex: no decision; options typed List[str] and an environment switch: cannot judge, never wrong."
    opts, env = lint([PAT/'settings_not_replies.py'], llama, 'llava15').findings
    assert (opts.what, opts.verdict) == ('def is_yes_no_question(…)', 'suspect') and 'choices is a List[str], not a reply' in opts.detail
    assert (env.what, env.verdict) == ('def downloads_enabled(…)', 'suspect') and 'os.environ.get' in env.detail   # a fixed lookup is no request: not the reply


def test_counted_under_a_word_test(llama):
    "Counting under `'yes' in text` reads the reply as yes; a number field and a debug switch lint cannot see change nothing."
    f, = lint([PAT/'counted_answers.py'], llama, 'llava15').findings
    assert [f.reading[a] for a in ('Yes', 'NO', 'Not sure', 'I cannot tell', '')] == ['yes', 'no', 'no', 'no', 'unknown']
    assert {a for a, _, _ in f.misread} == {'Not sure', 'I cannot tell'}


def test_tests_on_unseen_data_must_agree(llama, tmp_path):
    "A test on data lint cannot see is taken both ways; when the ways read the reply differently, lint cannot judge."
    (tmp_path/'coin.py').write_text('import random\n\ndef read(reply):\n    if random.random() > 0.5:\n        return "yes" if "yes" in reply.lower() else "no"\n'
                                    '    return "no" if "no" in reply.lower() else "yes"\n')
    f, = lint([tmp_path/'coin.py'], llama, 'llava15').findings
    assert f.verdict == 'suspect' and 'depends on random.random() > 0.5' in f.detail


def test_asserted_field_is_the_label(llama):
    "A field called 'answer' asserted to be yes or no is the gold label, the rule's own `pred_label` is not: 'Not sure' (no by its first letters) is credited under the label no."
    letters, score = lint([PAT/'asserted_label.py'], llama, 'llava15').findings
    assert score.verdict == 'label-dependent'
    assert [score.reading[a] for a in ('Yes', 'Not sure', 'Yes.')] == ['gold yes: credited; gold no: not credited',
                                                                       'gold yes: not credited; gold no: credited', 'gold yes: credited; gold no: not credited']


def test_paths_settings_and_loud_refusals(llama):
    "A yes/no branch only a setting reaches: cannot judge; a reader that asserts its format refuses loudly (no misreading); a test on a label alone: no finding."
    branch, rating = lint([PAT/'modes_and_asserts.py'], llama, 'llava15').findings
    assert branch.verdict == 'suspect' and 'path the model never took' in branch.detail
    assert rating.verdict == 'agrees' and rating.reading['correct.'] == 'refused' and rating.reading['Incorrect'] == 'no'


def test_old_parser_fixtures(llama):
    "POPE's default-yes rule assigned into the record; exact match, substring, prefix, negative words; a label-dependent count."
    r = lint([FIX/'field/pope_style_parse.py', FIX/'field/string_rules.py', FIX/'field/label_dependent.py'], llama, 'llava15')
    pope = by_line(r, 'pope_style_parse.py')[13]
    assert pope.verdict == 'disagrees' and "POPE's default-yes" in pope.detail and pope.default == 'yes'
    assert pope.reading == {'Yes': 'yes', 'yes': 'yes', 'Yes.': 'yes', 'Yes, there is a dog in the image.': 'yes', 'NO': 'yes', 'No.': 'no',
                            'Nope': 'yes', 'None': 'yes', 'Not sure': 'yes', 'There is no dog in the image.': 'no', 'I cannot tell': 'yes',
                            'Yes and no': 'no', '': 'yes'}
    rules = by_line(r, 'string_rules.py')
    assert [rules[n].reading['Yes.'] for n in (8, 15, 19)] == ['unknown', 'yes', 'yes']
    assert rules[8].detail.startswith('exact match') and rules[15].detail.startswith('substring') and rules[19].detail.startswith('prefix')
    lab = by_line(r, 'label_dependent.py')[6]
    assert lab.verdict == 'label-dependent' and lab.reading['Yes and no'] == 'credited' and lab.reading[''] == 'not credited'
    assert len(r.findings) == 6                            # the loop that turns gold labels into 1/0 is not a readout


def test_model_agrees_with_the_rules_it_models(llama, tmp_path):
    "Lint's model of the package's own POPE, exact-match and VLMEvalKit rules reads the battery as the functions themselves do."
    from pope_audit.foundation import readouts
    from pope_audit.foundation.readouts import Record
    from pope_audit.interface.lint import SILENCE
    bare = tmp_path/'readouts.py'                 # the package marks these rules `# pope-audit: ok`: read them without the marks
    bare.write_text(SILENCE.sub('#', (ROOT/'pope_audit/foundation/readouts.py').read_text()))
    got = {f.what: f.reading for f in lint([bare], llama, 'llava15').findings}
    for name in ('pope_parse', 'lmms_exact', 'vlmeval_yorn'):
        fn = getattr(readouts, name)
        assert got[f'def {name}(…)'] == {a: fn(Record('random', 1, 'x.jpg', 'q', 'yes', text=a)) for a in BATTERY}


def test_clean_code_and_silenced_lines(llama):
    "The clean example passes; its legacy pair is silenced; the helper file has no decision."
    r = lint([FIX/'clean'], llama, 'llava15')
    assert [(f.line, f.verdict) for f in r.findings] == [(8, 'derived'), (8, 'derived'), (11, 'agrees')]
    assert (r.silenced, [Path(u).name for u in r.undecided], r.exit_code()) == (1, ['helpers.py'], 0)
    assert greedy_reading('Yes, there is') == 'yes' and greedy_reading('Nope') == 'unknown'


def test_package_lints_clean(llama):
    "The package's own code: no wrong finding (the field's rules it reproduces carry the marker)."
    r = lint([ROOT/'pope_audit'], llama, 'llava15')
    assert ([f.where for f in r.findings if f.wrong], r.unread, r.exit_code()) == ([], [], 0)


# the command line --------------------------------------------------------------------------------------------------

def test_cli_exit_codes_and_json(capsys, shared, tmp_path):
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    assert run_cli(capsys, 'lint', FIX/'clean', '--tokenizer', gguf)[0] == 0
    assert run_cli(capsys, 'lint', FIX/'clean', '--tokenizer', gguf.parent, '--gguf-file', gguf.name)[0] == 0
    code, out, _ = run_cli(capsys, 'lint', FIX/'field/transferred_ids.py', '--tokenizer', shared/'tokenizers/qwen2', '--json')
    assert code == 1 and [f['spells'] for f in json.loads(out)['findings']][:2] == [[' }}'], ['?\n\n']]
    code, out, _ = run_cli(capsys, 'lint', FIX/'field', FIX/'bad', '--tokenizer', gguf, '--json')
    doc = json.loads(out)
    assert code == 1 and doc['tokenizer'] == str(gguf) and doc['files_read'] == 8 and len(doc['unread']) == 3
    assert all({'file', 'line', 'kind', 'ids', 'spells', 'verdict', 'fix', 'misread', 'default'} <= set(f) for f in doc['findings'])
    assert {f['verdict'] for f in doc['findings']} == {'derived', 'excluded', 'special', 'suspect', 'disagrees', 'label-dependent'}
    # cannot judge fails only with --strict; --exclude skips a file; the marker silences a line
    (tmp_path/'cfg.py').write_text('def ids(tok, cfg):\n    return tok.encode(cfg.yes_word, add_special_tokens=False)[-1]\n')
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)[0] == 0
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf, '--strict')[0] == 1
    (tmp_path/'old.py').write_text('YES_ID = 3582\n')
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf, '--exclude', 'old.py')[0] == 0
    assert run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)[0] == 1
    (tmp_path/'old.py').write_text('YES_ID = 3582  # pope-audit: ok\n')
    code, out, _ = run_cli(capsys, 'lint', tmp_path, '--tokenizer', gguf)
    assert code == 0 and '1 silenced' in out


def test_pre_commit_hook(capsys, shared):
    "The shipped hook runs `pope-audit lint` with the user's args and the staged files appended, as pre-commit calls it."
    hook, = yaml.safe_load((ROOT/'.pre-commit-hooks.yaml').read_text())
    assert hook['id'] == 'pope-audit-lint' and set(hook['types_or']) == {'python', 'jupyter'}
    prog, *sub = hook['entry'].split()
    assert prog == 'pope-audit'
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    assert run_cli(capsys, *sub, '--tokenizer', gguf, FIX/'clean/derived_readout.py', FIX/'field/two_token_logits.py')[0] == 1


LIGHT = '''
import sys
from pathlib import Path
from pope_audit.interface.lint import read_sources, scan
n = sum(len(scan(s)) for p in sorted(Path(sys.argv[1]).rglob('*.py')) for s in read_sources(p))
heavy = [m for m in ('torch', 'transformers.modeling_utils', 'transformers.models.auto.modeling_auto') if m in sys.modules]
print(n, heavy)
'''


def test_static_reading_is_light():
    "Finding the decisions loads neither torch nor transformers' model code (a fresh process)."
    out = subprocess.run([sys.executable, '-c', LIGHT, str(PAT)], capture_output=True, text=True, check=True).stdout.split(maxsplit=1)
    assert int(out[0]) > 30 and out[1].strip() == '[]'


def test_lint_command_is_light(shared):
    "`pope-audit lint` in a fresh process imports no torch."
    gguf = shared/'tokenizers/llama-spm/ggml-vocab-llama-spm.gguf'
    code = ('import sys\nfrom pope_audit.interface.cli import main\ntry: main(sys.argv[1:])\nexcept SystemExit: pass\n'
            "print('TORCH', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, '-c', code, 'lint', str(PAT), '--tokenizer', str(gguf)], capture_output=True, text=True).stdout
    assert 'TORCH False' in out
