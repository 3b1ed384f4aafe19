"Attention shares from the cached, batched path equal those of a full forward with output_attentions, on every family."
import pytest, torch
from pope_audit.models.tiny import TINY, stand_in_image
from pope_audit.models.adapters import Llava15, LlavaNext, Qwen2VL, InstructBlip
from pope_audit.models.engine import Engine

CLASSES = {'llava15': Llava15, 'llava-next': LlavaNext, 'qwen2-vl': Qwen2VL, 'instructblip': InstructBlip}


@pytest.mark.parametrize('family', [pytest.param(f, marks=pytest.mark.slow) if f == 'qwen2-vl' else f for f in CLASSES])   # Qwen2-VL: 12 s of CPU, run by CI (POPE_AUDIT_SLOW=1)
def test_attention_share_matches_full_forward(shared, family):
    a = CLASSES[family](*TINY[family]())
    img = stand_in_image('x.jpg')
    qs = ['Is there a dog in the image?', 'Is there a traffic light in the image?', 'Is there a cat in the image?']
    res = Engine(a).answer(img, qs, batch_size=3, max_new_tokens=1, attention=True)
    for q, r in zip(qs, res):
        inp = a.full_inputs(img, q)
        with torch.no_grad():
            a.model.set_attn_implementation('eager')
            out = a.model(**inp, output_attentions=True)
            a.model.set_attn_implementation('sdpa')
        att = out.language_model_outputs.attentions if family == 'instructblip' else out.attentions
        img_keys = inp['input_ids'][0] == a.image_token_id
        ref = [float(w[0, :, -1, :].mean(0)[img_keys].sum()) for w in att]
        assert max(abs(x - y) for x, y in zip(r['attention']['per_layer'], ref)) < 1e-5
        assert abs(r['attention']['image_share'] - sum(ref) / len(ref)) < 1e-5
