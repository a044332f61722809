"""Bad-input cases of labkit's quant/ public doors (see door.py for the
columns). `wrong(name, error, words)`: every required argument a Wrong(); a case with `missing=` has no
door yet and says where the call crashes today."""

from door import Door, wrong

from labkit.quant.kv_quality import kv_quality

CASES = [
    wrong("labkit.quant.bnb.load_bitsandbytes_model", words=("name",)),
    wrong("labkit.quant.evaluation.model_nbytes", words=("model",)),
    wrong("labkit.quant.evaluation.results_table", words=("results",)),
    wrong("labkit.quant.gguf_blocks.dequantize_gguf", words=("kind",)),
    wrong("labkit.quant.gguf_blocks.read_gguf_tensor", words=("source",)),
    wrong("labkit.quant.kv_quality.kv_quality", words=("model", "labkit's Llama")),
    Door(
        "labkit.quant.kv_quality.kv_quality",
        lambda kit: kv_quality(kit.tiny, kit.tokenizer, "Some text to read.", kv_dtypes=("int5",)),
        ValueError,
        ("kv_dtypes must be a tuple of names", "'int4-rot'", "('int5',)"),
    ),
    wrong("labkit.quant.linear.QuantLinear", words=("linear",)),
    wrong("labkit.quant.linear.QuantLinear.from_linear", words=("linear",)),
    wrong("labkit.quant.linear.quantize_model", words=("model",)),
    wrong("labkit.quant.linear.quantized_layers", words=("model",)),
    wrong("labkit.quant.nf4.nf4_dequantize", words=("q",)),
    wrong("labkit.quant.nf4.nf4_quantize", words=("x",)),
    wrong("labkit.quant.schemes.absmax_quantize", words=("x",)),
    wrong("labkit.quant.schemes.bits_per_weight", words=("bits",)),
    wrong("labkit.quant.schemes.dequantize_groupwise", words=("q",)),
    wrong("labkit.quant.schemes.quantization_error", words=("w",)),
    wrong("labkit.quant.schemes.quantize_groupwise", words=("w",)),
    wrong("labkit.quant.schemes.zeropoint_dequantize", words=("codes",)),
    wrong("labkit.quant.schemes.zeropoint_quantize", words=("x",)),
]

NO_ARGUMENT = {  # name -> why it has no bad-input case
    "labkit.quant.evaluation.DECODE_PROMPT": "a constant: data the notebooks read, not a call",
    "labkit.quant.nf4.NF4_CODEBOOK": "a constant: data the notebooks read, not a call",
    "labkit.quant.bnb.bitsandbytes_support": "only an optional device, pick_device's, tested in tests/models/test_bad_input.py",
    "labkit.quant.evaluation.evaluate": "only optional sizes; a run takes minutes, its variant names are checked in tests/quant",
    "labkit.quant.nf4.normal_float_levels": "only an optional offset of the NF4 construction, any float",
}
