"The shipped tiny models (LLaVA-1.5, Qwen2-VL, InstructBLIP): they load through the family adapters, have four decoder layers, answer at least 75% of held-out synthetic questions right, their assembled weights are the trained ones bit for bit, and all fit in 30 MB."
import json
import pytest
from safetensors.torch import load_file
from pope_audit.models.adapters import load_adapter
from pope_audit.models.tinyvlm import TRAINED, ASSETS_ROOT, tiny_vlm_dir, weights_hash, heldout, readout_table, first_logits


@pytest.fixture(scope='module')
def questions():
    return heldout(n_images=10, seed=11)        # 180 questions over the three splits, half of them yes


@pytest.mark.parametrize('family', list(TRAINED))
def test_shipped_model(family, questions, shared):
    d = tiny_vlm_dir(family)
    a = load_adapter(str(d))
    assert a.family == family
    assert a.model.config.text_config.num_hidden_layers >= 4 and len(a.decoder_layers()) >= 4
    assert weights_hash(load_file(d/'model.safetensors')) == json.loads((d/'training.json').read_text())['weights_sha256']
    t = readout_table(a, *questions)
    assert len(t) == 180 and (t.label == 'yes').mean() == 0.5
    assert (t.derived == t.label).mean() >= 0.75     # measured 0.81 (LLaVA), 0.83 (Qwen2-VL), 0.78 (InstructBLIP); a coin scores 0.75 or more with probability 6e-12
    sc, qs = questions            # the table's logits are the family's own whole-prompt logits
    greedy = [first_logits(a, sc.images[int(im[len('heldout_'):-len('.png')])], q).argmax().item() for im, q in zip(qs.image[:3], qs.question[:3])]
    assert a.tokenizer.convert_ids_to_tokens(greedy) == t.greedy[:3].tolist()


def test_rows_outside_training_are_the_seeded_base():
    from pope_audit.models.tinyvlm import assemble, base_rows
    from safetensors import safe_open
    for d in TRAINED.values():
        src = ASSETS_ROOT/d
        with safe_open(str(src/'rows.safetensors'), 'pt') as f: meta = f.metadata()
        emb = assemble(src)[meta['embedding']]
        ids = load_file(src/'rows.safetensors')['rows.ids']
        keep = emb.new_ones(len(emb), dtype=bool); keep[ids] = False
        assert (emb[keep] == base_rows(len(emb), emb.shape[1], int(meta['seed'])).half()[keep]).all()
        assert len(ids) < 1000


def test_shipped_size():
    total = sum(p.stat().st_size for d in TRAINED.values() for p in (ASSETS_ROOT/d).iterdir())
    assert total <= 30 * 2**20
    assert set(TRAINED) == {'llava15', 'qwen2-vl', 'instructblip'}
