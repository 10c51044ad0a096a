"""Finite-difference cases of the one-input functions and activations: inputs inside each function's
domain (inverse trigonometry, logarithms, roots) and away from kinks, where a central difference
straddling the kink would measure neither side."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
from gradcheck import Case, case

rng = np.random.default_rng(11)


def f32(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def away_from(*shape: int, kinks: tuple = (0.0,), gap: float = 0.1, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    """Values in [low, high] at least ``gap`` from every kink."""
    values = f32(*shape, low=low, high=high)
    for kink in kinks:
        close = np.abs(values - kink) < gap
        values[close] = kink + np.where(values[close] >= kink, gap, -gap) * 1.5
    return values.astype(np.float32)


def unary(name: str, op: str, x: np.ndarray, domain: str = "", **attributes: object) -> Case:
    made = case(name, op, [("x", x)], ["x"], domain=domain, **attributes)
    if domain:
        made.extra_opsets = {domain: 1}
    return made


def symbolic(c: Case) -> Case:
    """The case with x fed as data of a symbolic batch, behind a Mul by the checked parameter w."""
    from onnx import helper

    node = c.nodes[0]
    x = c.params.pop("x")
    c.data["x"] = x
    c.params["w"] = f32(*x.shape[1:], low=0.5, high=1.5)
    scaled = helper.make_node("Mul", ["x", "w"], ["xw"])
    node.input[0] = "xw"
    c.nodes.insert(0, scaled)
    c.symbolic_batch = True
    return c


CASES: Dict[str, List[Case]] = {
    "Relu": [unary("relu", "Relu", away_from(3, 5))],
    "Neg": [unary("neg", "Neg", f32(3, 4))],
    "Abs": [unary("abs", "Abs", away_from(3, 4))],
    "Exp": [unary("exp", "Exp", f32(3, 4)), symbolic(unary("exp_symbolic", "Exp", f32(4, 3)))],
    "Log": [unary("log", "Log", f32(3, 4, low=0.2, high=3.0))],
    "Sqrt": [unary("sqrt", "Sqrt", f32(3, 4, low=0.2, high=3.0))],
    "Reciprocal": [unary("reciprocal", "Reciprocal", away_from(3, 4, gap=0.3))],
    "Sin": [unary("sin", "Sin", f32(3, 4, low=-3, high=3))],
    "Cos": [unary("cos", "Cos", f32(3, 4, low=-3, high=3))],
    "Tan": [unary("tan", "Tan", f32(3, 4, low=-1.2, high=1.2))],
    "Asin": [unary("asin", "Asin", f32(3, 4, low=-0.8, high=0.8))],
    "Acos": [unary("acos", "Acos", f32(3, 4, low=-0.8, high=0.8))],
    "Atan": [unary("atan", "Atan", f32(3, 4, low=-3, high=3))],
    "Sinh": [unary("sinh", "Sinh", f32(3, 4, low=-2, high=2))],
    "Cosh": [unary("cosh", "Cosh", f32(3, 4, low=-2, high=2))],
    "Asinh": [unary("asinh", "Asinh", f32(3, 4, low=-3, high=3))],
    "Acosh": [unary("acosh", "Acosh", f32(3, 4, low=1.2, high=4))],
    "Atanh": [unary("atanh", "Atanh", f32(3, 4, low=-0.8, high=0.8))],
    "Erf": [unary("erf", "Erf", f32(3, 4, low=-2, high=2))],
    "Tanh": [unary("tanh", "Tanh", f32(3, 4, low=-2, high=2)), symbolic(unary("tanh_symbolic", "Tanh", f32(5, 2)))],
    "Sigmoid": [unary("sigmoid", "Sigmoid", f32(3, 4, low=-3, high=3))],
    "Softplus": [unary("softplus", "Softplus", f32(3, 4, low=-3, high=3))],
    "Softsign": [unary("softsign", "Softsign", away_from(3, 4))],
    "Elu": [unary("elu", "Elu", away_from(3, 4)), unary("elu_alpha", "Elu", away_from(3, 4), alpha=0.5)],
    "Selu": [unary("selu", "Selu", away_from(3, 4)),
             unary("selu_attributes", "Selu", away_from(3, 4), alpha=1.5, gamma=0.8)],
    "Celu": [unary("celu", "Celu", away_from(3, 4)), unary("celu_alpha", "Celu", away_from(3, 4), alpha=2.0)],
    "LeakyRelu": [unary("leaky_relu", "LeakyRelu", away_from(3, 4)),
                  symbolic(unary("leaky_relu_alpha", "LeakyRelu", away_from(4, 3), alpha=0.3))],
    "PRelu": [case("prelu_channel", "PRelu", [("x", away_from(2, 3, 4)), ("slope", f32(3, 1, low=0.1, high=0.5))],
                   ["x", "slope"]),
              case("prelu_scalar_slope", "PRelu", [("x", away_from(3, 4)), ("slope", f32(1, low=0.1, high=0.5))],
                   ["x", "slope"]),
              case("prelu_full_slope", "PRelu", [("x", away_from(3, 4)), ("slope", f32(3, 4))], ["x", "slope"])],
    "ThresholdedRelu": [unary("thresholded_relu", "ThresholdedRelu", away_from(3, 4, kinks=(1.0,))),
                        unary("thresholded_relu_alpha", "ThresholdedRelu", away_from(3, 4, kinks=(0.5,)), alpha=0.5)],
    "HardSigmoid": [unary("hard_sigmoid", "HardSigmoid", away_from(4, 5, kinks=(-2.5, 2.5), low=-4, high=4)),
                    unary("hard_sigmoid_attributes", "HardSigmoid", away_from(4, 5, kinks=(-1.0, 1.0)),
                          alpha=0.5, beta=0.5)],
    "HardSwish": [unary("hard_swish", "HardSwish", away_from(4, 5, kinks=(-3.0, 3.0), low=-5, high=5))],
    "Mish": [unary("mish", "Mish", f32(3, 4, low=-3, high=3), )],
    "Gelu": [],
    "FastGelu": [unary("fast_gelu", "FastGelu", f32(3, 4, low=-3, high=3), domain="com.microsoft")],
}
for c in CASES["Mish"] + CASES["HardSwish"]:
    c.opset = 18  # Mish and HardSwish came in opset 18 and 14
for approximate in ("none", "tanh"):
    gelu = unary(f"gelu_{approximate}", "Gelu", f32(3, 4, low=-3, high=3), approximate=approximate)
    gelu.opset = 20
    CASES["Gelu"].append(gelu)
microsoft_gelu = unary("gelu_microsoft", "Gelu", f32(3, 4, low=-3, high=3), domain="com.microsoft")
CASES["Gelu"].append(microsoft_gelu)
fast_gelu_bias = case("fast_gelu_bias", "FastGelu", [("x", f32(2, 3, 4)), ("bias", f32(4))], ["x", "bias"],
                      domain="com.microsoft")
fast_gelu_bias.extra_opsets = {"com.microsoft": 1}
CASES["FastGelu"].append(fast_gelu_bias)
bias_gelu = case("bias_gelu", "BiasGelu", [("x", f32(2, 3, 4)), ("bias", f32(4))], ["x", "bias"],
                 domain="com.microsoft")
bias_gelu.extra_opsets = {"com.microsoft": 1}
CASES["BiasGelu"] = [bias_gelu]
CASES["QuickGelu"] = [unary("quick_gelu", "QuickGelu", f32(3, 4, low=-3, high=3), domain="com.microsoft"),
                      unary("quick_gelu_alpha", "QuickGelu", f32(3, 4, low=-3, high=3), domain="com.microsoft",
                            alpha=1.0)]
