#!/usr/bin/env python3
"""Generate tcoll model profiles (data/profiles/*.csv) from the published architectures.

Every network is built programmatically layer by layer, in the order its reference
implementation registers parameters (torchvision for the CNNs, HuggingFace
transformers for BERT and GPT-2), so parameter counts are derived, not typed in.
Each output row is one gradient tensor in the order *backward* produces it, which is
the reverse of the registration order (the order PyTorch DDP also assumes).

FLOPs are forward floating point operations per sample (one image / one sequence),
counting a multiply-add as 2 FLOPs, attributed to the tensor whose layer performs them:
  conv / linear weight : 2 * MACs          conv / linear bias : output elements
  batch/layer norm     : weight 2 * output elements, bias 1 * output elements
  embedding            : hidden size per token (the gather)
Parameterless work that is not negligible is attributed to the nearest tensor that
runs it in backward: attention score and context matmuls (2 * 2 * s^2 * d per layer)
to the attention output projection weight, GPT-2's tied LM head matmul to ln_f.weight.
Pooling, activations and softmax are ignored.

Usage: scripts/gen_profiles.py [--out data/profiles] [--header include/tcoll/plan/embedded/resnet50.hpp]
"""
import argparse
import os


class Net:
    def __init__(self, name, source):
        self.name = name
        self.source = source
        self.tensors = []  # (name, elements, forward_flops) in registration order

    def add(self, name, elements, flops):
        assert elements > 0
        self.tensors.append((name, int(elements), int(flops)))

    def conv(self, name, cin, cout, k, hout, wout, bias, groups=1):
        kh, kw = (k, k) if isinstance(k, int) else k
        macs = cout * (cin // groups) * kh * kw * hout * wout
        self.add(name + ".weight", cout * (cin // groups) * kh * kw, 2 * macs)
        if bias:
            self.add(name + ".bias", cout, cout * hout * wout)

    def bn(self, name, c, hout, wout):
        self.add(name + ".weight", c, 2 * c * hout * wout)
        self.add(name + ".bias", c, c * hout * wout)

    def linear(self, name, fin, fout, tokens=1, bias=True):
        self.add(name + ".weight", fin * fout, 2 * fin * fout * tokens)
        if bias:
            self.add(name + ".bias", fout, fout * tokens)

    def layernorm(self, name, d, tokens):
        self.add(name + ".weight", d, 2 * d * tokens)
        self.add(name + ".bias", d, d * tokens)

    def total(self):
        return sum(t[1] for t in self.tensors)


def conv_out(size, k, stride, pad):
    return (size + 2 * pad - k) // stride + 1


# --- torchvision ResNet (v1.5: stride on the 3x3 conv of a bottleneck) --------------
def resnet(depth):
    blocks = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
    net = Net("resnet%d" % depth, "torchvision.models.resnet%d (v1.5, 224x224 input)" % depth)
    net.conv("conv1", 3, 64, 7, 112, 112, bias=False)
    net.bn("bn1", 64, 112, 112)
    size = 56  # after the 3x3/2 max pool
    inplanes = 64
    for stage, (planes, count) in enumerate(zip([64, 128, 256, 512], blocks)):
        for b in range(count):
            stride = 2 if (stage > 0 and b == 0) else 1
            out = size // stride
            p = "layer%d.%d" % (stage + 1, b)
            width = planes
            net.conv(p + ".conv1", inplanes, width, 1, size, size, bias=False)
            net.bn(p + ".bn1", width, size, size)
            net.conv(p + ".conv2", width, width, 3, out, out, bias=False)
            net.bn(p + ".bn2", width, out, out)
            net.conv(p + ".conv3", width, planes * 4, 1, out, out, bias=False)
            net.bn(p + ".bn3", planes * 4, out, out)
            if b == 0:  # torchvision assigns downsample after bn3
                net.conv(p + ".downsample.0", inplanes, planes * 4, 1, out, out, bias=False)
                net.bn(p + ".downsample.1", planes * 4, out, out)
            inplanes = planes * 4
            size = out
    net.linear("fc", 2048, 1000)
    return net


# --- torchvision VGG (no batch norm) ------------------------------------------------
def vgg(depth):
    cfg = {16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M"],
           19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
                512, 512, 512, 512, "M"]}[depth]
    net = Net("vgg%d" % depth, "torchvision.models.vgg%d (no batch norm, 224x224 input)" % depth)
    cin, size, idx = 3, 224, 0
    for v in cfg:
        if v == "M":
            size //= 2
        else:
            net.conv("features.%d" % idx, cin, v, 3, size, size, bias=True)
            cin = v
            idx += 1  # the ReLU
        idx += 1
    net.linear("classifier.0", 512 * 7 * 7, 4096)
    net.linear("classifier.3", 4096, 4096)
    net.linear("classifier.6", 4096, 1000)
    return net


# --- torchvision AlexNet ------------------------------------------------------------
def alexnet():
    net = Net("alexnet", "torchvision.models.alexnet (224x224 input)")
    s = conv_out(224, 11, 4, 2)  # 55
    net.conv("features.0", 3, 64, 11, s, s, bias=True)
    s = conv_out(s, 3, 2, 0)  # 27
    net.conv("features.3", 64, 192, 5, s, s, bias=True)
    s = conv_out(s, 3, 2, 0)  # 13
    net.conv("features.6", 192, 384, 3, s, s, bias=True)
    net.conv("features.8", 384, 256, 3, s, s, bias=True)
    net.conv("features.10", 256, 256, 3, s, s, bias=True)
    net.linear("classifier.1", 256 * 6 * 6, 4096)
    net.linear("classifier.4", 4096, 4096)
    net.linear("classifier.6", 4096, 1000)
    return net


# --- torchvision GoogLeNet (aux_logits=False, as the pretrained model ships) --------
def googlenet():
    net = Net("googlenet", "torchvision.models.googlenet (aux_logits=False, 224x224 input)")

    def basic(name, cin, cout, k, size):
        net.conv(name + ".conv", cin, cout, k, size, size, bias=False)
        net.bn(name + ".bn", cout, size, size)

    basic("conv1", 3, 64, 7, 112)
    basic("conv2", 64, 64, 1, 56)
    basic("conv3", 64, 192, 3, 56)

    def inception(name, cin, c1, c3r, c3, c5r, c5, pp, size):
        basic(name + ".branch1", cin, c1, 1, size)
        basic(name + ".branch2.0", cin, c3r, 1, size)
        basic(name + ".branch2.1", c3r, c3, 3, size)
        basic(name + ".branch3.0", cin, c5r, 1, size)
        basic(name + ".branch3.1", c5r, c5, 3, size)  # torchvision uses 3x3 here
        basic(name + ".branch4.1", cin, pp, 1, size)
        return c1 + c3 + c5 + pp

    c = inception("inception3a", 192, 64, 96, 128, 16, 32, 32, 28)
    c = inception("inception3b", c, 128, 128, 192, 32, 96, 64, 28)
    c = inception("inception4a", c, 192, 96, 208, 16, 48, 64, 14)
    c = inception("inception4b", c, 160, 112, 224, 24, 64, 64, 14)
    c = inception("inception4c", c, 128, 128, 256, 24, 64, 64, 14)
    c = inception("inception4d", c, 112, 144, 288, 32, 64, 64, 14)
    c = inception("inception4e", c, 256, 160, 320, 32, 128, 128, 14)
    c = inception("inception5a", c, 256, 160, 320, 32, 128, 128, 7)
    c = inception("inception5b", c, 384, 192, 384, 48, 128, 128, 7)
    net.linear("fc", c, 1000)
    return net


# --- HuggingFace bert-base-uncased (BertModel with pooler), sequence length 128 -----
def bert_base(seq=128):
    d, ff, layers, vocab = 768, 3072, 12, 30522
    net = Net("bert_base", "HuggingFace bert-base-uncased BertModel incl. pooler, seq len %d" % seq)
    net.add("embeddings.word_embeddings.weight", vocab * d, d * seq)
    net.add("embeddings.position_embeddings.weight", 512 * d, d * seq)
    net.add("embeddings.token_type_embeddings.weight", 2 * d, d * seq)
    net.layernorm("embeddings.LayerNorm", d, seq)
    for i in range(layers):
        p = "encoder.layer.%d." % i
        net.linear(p + "attention.self.query", d, d, seq)
        net.linear(p + "attention.self.key", d, d, seq)
        net.linear(p + "attention.self.value", d, d, seq)
        net.add(p + "attention.output.dense.weight", d * d, 2 * d * d * seq + 4 * seq * seq * d)
        net.add(p + "attention.output.dense.bias", d, d * seq)
        net.layernorm(p + "attention.output.LayerNorm", d, seq)
        net.linear(p + "intermediate.dense", d, ff, seq)
        net.linear(p + "output.dense", ff, d, seq)
        net.layernorm(p + "output.LayerNorm", d, seq)
    net.linear("pooler.dense", d, d, 1)
    return net


# --- HuggingFace gpt2 (124M, LM head tied to wte), sequence length 1024 -------------
def gpt2_small(seq=1024):
    d, layers, vocab, ctx = 768, 12, 50257, 1024
    net = Net("gpt2_small", "HuggingFace gpt2 (124M, tied LM head), seq len %d" % seq)
    net.add("wte.weight", vocab * d, d * seq)
    net.add("wpe.weight", ctx * d, d * seq)
    for i in range(layers):
        p = "h.%d." % i
        net.layernorm(p + "ln_1", d, seq)
        net.linear(p + "attn.c_attn", d, 3 * d, seq)
        net.add(p + "attn.c_proj.weight", d * d, 2 * d * d * seq + 4 * seq * seq * d)
        net.add(p + "attn.c_proj.bias", d, d * seq)
        net.layernorm(p + "ln_2", d, seq)
        net.linear(p + "mlp.c_fc", d, 4 * d, seq)
        net.linear(p + "mlp.c_proj", 4 * d, d, seq)
    net.add("ln_f.weight", d, 2 * d * seq + 2 * d * vocab * seq)  # + tied LM head matmul
    net.add("ln_f.bias", d, d * seq)
    return net


MODELS = [resnet(50), resnet(101), resnet(152), vgg(16), vgg(19), alexnet(), googlenet(),
          bert_base(), gpt2_small()]


def write_csv(net, out_dir):
    path = os.path.join(out_dir, net.name + ".csv")
    with open(path, "w") as f:
        f.write("# tcoll model profile: %s\n" % net.name)
        f.write("# source: %s\n" % net.source)
        f.write("# generated by scripts/gen_profiles.py; do not edit by hand\n")
        f.write("# tensors: %d, parameters: %d\n" % (len(net.tensors), net.total()))
        f.write("# rows in backward order; forward_flops per sample, multiply-add = 2\n")
        f.write("name,elements,forward_flops\n")
        for name, elements, flops in reversed(net.tensors):
            f.write("%s,%d,%d\n" % (name, elements, flops))
    return path


def write_header(net, path):
    with open(path, "w") as f:
        f.write("// Generated by scripts/gen_profiles.py from the %s architecture; do not edit.\n"
                % net.name)
        f.write("#pragma once\n\n#include <array>\n\n#include \"tcoll/plan/profile.hpp\"\n\n")
        f.write("namespace tcoll::plan::embedded {\n\n")
        f.write("/// %s: %d gradient tensors, %d parameters, in backward order.\n"
                % (net.source, len(net.tensors), net.total()))
        f.write("inline constexpr std::array<tensor_spec, %d> %s{{\n" % (len(net.tensors), net.name))
        for name, elements, flops in reversed(net.tensors):
            f.write("    {\"%s\", %d, %d},\n" % (name, elements, flops))
        f.write("}};\n\n} // namespace tcoll::plan::embedded\n")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(root, "data", "profiles"))
    ap.add_argument("--header",
                    default=os.path.join(root, "include", "tcoll", "plan", "embedded", "resnet50.hpp"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for net in MODELS:
        write_csv(net, args.out)
        print("%-12s %4d tensors %12d parameters" % (net.name, len(net.tensors), net.total()))
    write_header(MODELS[0], args.header)


if __name__ == "__main__":
    main()
