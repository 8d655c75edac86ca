"""The FSDP unit of a model (bench.run.strategy.decoder_layer_classes): its architecture's decoder layer."""

import pytest
from transformers.models.llama.modeling_llama import LlamaDecoderLayer
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

from bench.run.strategy import decoder_layer_classes


@pytest.mark.parametrize(
    "name, layer",
    [
        ("Qwen/Qwen3-8B", Qwen3DecoderLayer),
        ("tiny-500k", Qwen3DecoderLayer),  # the tiny sizes are Qwen3 models
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", Qwen2DecoderLayer),  # a Qwen2 architecture
        ("meta-llama/Llama-3.1-8B-Instruct", LlamaDecoderLayer),
    ],
)
def test_each_family_gets_its_own_decoder_layer(name, layer):
    assert decoder_layer_classes(name) == {layer}


def test_a_saved_model_is_read_from_its_config(policy_dir):
    assert decoder_layer_classes(str(policy_dir)) == {Qwen3DecoderLayer}
