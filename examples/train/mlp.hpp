#pragma once
/// \file
/// A multilayer perceptron (784-512-256-10 by default, ReLU, softmax cross-entropy) with
/// forward and backward passes in Eigen, and SGD with momentum.
///
/// Memory layout, the part a communication library cares about: all parameters live in ONE
/// contiguous float buffer and all gradients in another, with the same layout. Each layer
/// has two tensors (weight, bias); tensors are laid out in BACKWARD order, the order in which
/// backward completes them: the last layer's weight at offset 0, then its bias, then the
/// previous layer's weight and bias, and so on down to the first layer's bias at the end
/// (GradientFlow's gradient pool: tensor m at offset 0). Backward calls `on_gradient_ready(i)`
/// as soon as tensor i's gradient is final, so a scheduler can start communicating it while
/// the earlier layers are still being differentiated.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// Shape of the network and the seed of its initial weights.
struct mlp_config {
  /// Widths from input to output; hidden layers use ReLU, the last one feeds softmax.
  std::vector<std::size_t> layer_widths{784, 512, 256, 10};
  /// Seeds the weight initialisation; equal seeds give bitwise equal parameters.
  std::uint64_t seed = 1;
};

/// Where one tensor lives inside the parameter (and, identically, the gradient) buffer.
struct tensor_layout {
  std::string name;        ///< "layer2.weight", "layer2.bias", ...
  std::size_t offset = 0;  ///< in floats from the start of the buffer
  std::size_t rows = 0;    ///< output width
  std::size_t columns = 0; ///< input width for a weight, 1 for a bias
  std::size_t size() const noexcept { return rows * columns; }
};

/// Sum of per-sample losses and number of correct predictions over a batch.
struct batch_result {
  double loss_sum = 0;
  std::size_t correct = 0;
};

namespace detail {
/// splitmix64: a small, portable, well-mixed generator (same stream on every platform,
/// unlike the distributions of <random>).
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [-1, 1) from the top 24 bits (exactly representable in float).
  float symmetric_unit() noexcept {
    constexpr int mantissa_bits = std::numeric_limits<float>::digits;
    const auto top = static_cast<float>(next() >> (64 - mantissa_bits));
    return std::ldexp(top, 1 - mantissa_bits) - 1.0f;
  }
};
} // namespace detail

/// The network. Not copyable: its tensor views point into its own buffers.
class mlp {
public:
  /// Column-major float matrix; a batch is `width x samples`, one sample per column.
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  using matrix_view = Eigen::Map<matrix>;
  using vector_view = Eigen::Map<Eigen::VectorXf>;

  /// Called by `forward_backward` with a tensor index (backward order, see the file
  /// comment) as soon as that tensor's gradient is complete. Empty: not called.
  std::function<void(std::size_t tensor_index)> on_gradient_ready;

  explicit mlp(mlp_config config = {}) : config_(std::move(config)) {
    const auto& widths = config_.layer_widths;
    if (widths.size() < 2) throw std::invalid_argument("mlp: needs at least input and output");
    for (std::size_t w : widths)
      if (w == 0) throw std::invalid_argument("mlp: layer widths must be positive");
    const std::size_t layers = widths.size() - 1;
    std::size_t offset = 0;
    for (std::size_t back = 0; back < layers; ++back) {
      const std::size_t layer = layers - 1 - back;
      const std::string prefix = "layer" + std::to_string(layer + 1);
      tensors_.push_back({prefix + ".weight", offset, widths[layer + 1], widths[layer]});
      offset += tensors_.back().size();
      tensors_.push_back({prefix + ".bias", offset, widths[layer + 1], 1});
      offset += tensors_.back().size();
    }
    weight_gradient_from_factors_.assign(layers, false);
    parameters_.assign(offset, 0.0f);
    gradients_.assign(offset, 0.0f);
    gradient_storage_ = gradients_;
    for (const auto& t : tensors_) gradient_sizes_.push_back(t.size());
    initialise();
  }
  mlp(const mlp&) = delete;
  mlp& operator=(const mlp&) = delete;

  /// Number of weight layers.
  std::size_t layer_count() const noexcept { return config_.layer_widths.size() - 1; }
  /// The tensors in buffer (= backward) order.
  const std::vector<tensor_layout>& tensors() const noexcept { return tensors_; }
  /// Element counts of the gradient tensors in backward order (sum = gradients().size()).
  std::span<const std::size_t> gradient_tensor_sizes() const noexcept { return gradient_sizes_; }
  /// Every parameter, in the layout of `tensors()`.
  std::span<float> parameters() noexcept { return parameters_; }
  std::span<const float> parameters() const noexcept { return parameters_; }
  /// Every gradient of the last `forward_backward`, in the layout of `tensors()` (a layer
  /// set by `set_weight_gradient_from_factors` has its weight tensor left as it was).
  std::span<float> gradients() noexcept { return gradient_storage_; }
  std::span<const float> gradients() const noexcept { return gradient_storage_; }
  /// Backward writes the gradients into `storage` from now on (same layout, e.g. a
  /// `tcoll::gradient_pool` built from `gradient_tensor_sizes()`): zero copy into the
  /// communication buffer. `storage` must outlive its use here.
  void bind_gradients(std::span<float> storage) {
    if (storage.size() != gradients_.size())
      throw std::invalid_argument("mlp::bind_gradients: " + std::to_string(storage.size()) +
                                  " elements given, the model has " +
                                  std::to_string(gradients_.size()) + " gradients");
    gradient_storage_ = storage;
  }

  /// Index in `tensors()` of layer `layer`'s weight (its bias follows it).
  std::size_t weight_tensor(std::size_t layer) const noexcept {
    return 2 * (layer_count() - 1 - layer);
  }

  /// The sufficient factors of one layer's weight gradient (Poseidon/SFB): the gradient
  /// (rows x columns, column-major) is `delta * input^T` summed over the samples, `delta`
  /// rows x samples and `input` columns x samples, both column-major (so `input` is a
  /// samples x columns row-major matrix of u's and `delta` one of v's). Valid only inside
  /// `on_gradient_ready(weight_tensor(layer))`; `layer` says which.
  struct factors {
    std::size_t layer = 0;
    const float* delta = nullptr;
    const float* input = nullptr;
    std::size_t samples = 0;
  };
  /// The factors of the weight tensor being announced (see `factors`).
  const factors& current_factors() const noexcept { return factors_; }

  /// Marks layer `layer`'s weight gradient as rebuilt from its sufficient factors after
  /// backward (`--scheme hybrid`'s SFB layers): `forward_backward` then skips that layer's
  /// dense weight-gradient GEMM (rows x columns x samples multiply-adds) and leaves its
  /// weight tensor of `gradients()` unwritten, holding whatever it held before (zeros, or an
  /// earlier step's values). Everything else is as before: the tensor is still announced
  /// with `current_factors()`, the bias gradient and the error sent on to the layer below are
  /// computed, so the other tensors come out bitwise the same. Whoever sets this must
  /// overwrite the whole weight tensor before anything reads `gradients()`.
  void set_weight_gradient_from_factors(std::size_t layer, bool from_factors) {
    if (layer >= layer_count())
      throw std::invalid_argument("mlp::set_weight_gradient_from_factors: layer " +
                                  std::to_string(layer) + " of " + std::to_string(layer_count()));
    weight_gradient_from_factors_[layer] = from_factors;
  }
  /// Does backward leave layer `layer`'s weight gradient to the factors' reconstruction?
  bool weight_gradient_from_factors(std::size_t layer) const noexcept {
    return weight_gradient_from_factors_[layer];
  }
  /// Dense weight gradients backward has written so far (a GEMM, or zeros for an empty
  /// shard), one per layer per `forward_backward` except the layers left to their factors.
  std::uint64_t dense_weight_gradients_written() const noexcept {
    return dense_weight_gradients_written_;
  }

  /// Forward pass over `samples` inputs (column-major `input width x samples`) and their
  /// labels, then backward: the gradients of `gradient_scale * sum of per-sample losses`
  /// replace `gradients()` (but for the weights of layers left to their factors, see
  /// `set_weight_gradient_from_factors`), and `on_gradient_ready` fires once per tensor in
  /// backward order.
  batch_result forward_backward(const float* inputs, const std::uint8_t* labels,
                                std::size_t samples, float gradient_scale) {
    const batch_result result = forward(inputs, labels, samples, true);
    for (std::size_t back = 0; back < layer_count(); ++back) {
      const std::size_t layer = layer_count() - 1 - back;
      const std::size_t w = weight_tensor(layer);
      auto dw = gradient_matrix(w);
      auto db = gradient_vector(w + 1);
      if (back == 0) output_delta_ *= gradient_scale; // d(scaled loss)/d(logits)
      const matrix& delta = back == 0 ? output_delta_ : hidden_delta_;
      const bool dense_weight_gradient = !weight_gradient_from_factors_[layer];
      // An empty shard contributes zero gradients (a 0-deep product is left to no kernel).
      if (samples == 0) {
        if (dense_weight_gradient) dw.setZero();
        db.setZero();
      } else {
        if (dense_weight_gradient)
          dw.noalias() = delta * input_of(layer, inputs, samples).transpose();
        db.noalias() = delta.rowwise().sum();
      }
      dense_weight_gradients_written_ += dense_weight_gradient;
      factors_ = {layer, delta.data(), input_of(layer, inputs, samples).data(), samples};
      notify(w);
      notify(w + 1);
      if (layer > 0) {
        // Propagate through this layer's weight and the previous layer's ReLU.
        matrix previous = weight_matrix(layer).transpose() * delta;
        hidden_delta_ =
            previous.cwiseProduct((activations_[layer - 1].array() > 0.0f).cast<float>().matrix());
      }
    }
    return result;
  }

  /// Forward pass only: the summed loss and the number of correct argmax predictions.
  batch_result evaluate(const float* inputs, const std::uint8_t* labels, std::size_t samples) {
    return forward(inputs, labels, samples, false);
  }

private:
  /// He-uniform weights for ReLU (variance 2 / fan_in, i.e. U(-sqrt(6/fan_in),
  /// +sqrt(6/fan_in))), zero biases; each tensor has its own stream derived from the seed,
  /// so the values do not depend on the buffer layout.
  void initialise() {
    constexpr float relu_gain_squared = 2.0f;    // Var(w) = gain^2 / fan_in (He et al.)
    constexpr float uniform_variance_factor = 3; // Var(U(-a, a)) = a^2 / 3
    for (std::size_t layer = 0; layer < layer_count(); ++layer) {
      const std::size_t w = weight_tensor(layer);
      const auto fan_in = static_cast<float>(tensors_[w].columns);
      const float limit = std::sqrt(uniform_variance_factor * relu_gain_squared / fan_in);
      detail::splitmix64 rng{config_.seed ^ (0x5851f42d4c957f2dULL * (layer + 1))};
      auto values = std::span(parameters_).subspan(tensors_[w].offset, tensors_[w].size());
      for (float& v : values) v = limit * rng.symmetric_unit();
      auto bias = std::span(parameters_).subspan(tensors_[w + 1].offset, tensors_[w + 1].size());
      std::fill(bias.begin(), bias.end(), 0.0f);
    }
  }

  matrix_view weight_matrix(std::size_t layer) {
    const auto& t = tensors_[weight_tensor(layer)];
    return {parameters_.data() + t.offset, static_cast<Eigen::Index>(t.rows),
            static_cast<Eigen::Index>(t.columns)};
  }
  vector_view bias_vector(std::size_t layer) {
    const auto& t = tensors_[weight_tensor(layer) + 1];
    return {parameters_.data() + t.offset, static_cast<Eigen::Index>(t.rows)};
  }
  matrix_view gradient_matrix(std::size_t tensor) {
    const auto& t = tensors_[tensor];
    return {gradient_storage_.data() + t.offset, static_cast<Eigen::Index>(t.rows),
            static_cast<Eigen::Index>(t.columns)};
  }
  vector_view gradient_vector(std::size_t tensor) {
    const auto& t = tensors_[tensor];
    return {gradient_storage_.data() + t.offset, static_cast<Eigen::Index>(t.rows)};
  }
  Eigen::Map<const matrix> input_of(std::size_t layer, const float* inputs, std::size_t samples) {
    if (layer == 0)
      return {inputs, static_cast<Eigen::Index>(config_.layer_widths[0]),
              static_cast<Eigen::Index>(samples)};
    const matrix& a = activations_[layer - 1];
    return {a.data(), a.rows(), a.cols()};
  }
  void notify(std::size_t tensor) {
    if (on_gradient_ready) on_gradient_ready(tensor);
  }

  /// Runs the layers; keeps the hidden activations and, when `keep_output_delta`, the
  /// softmax-minus-one-hot matrix that backward starts from.
  batch_result forward(const float* inputs, const std::uint8_t* labels, std::size_t samples,
                       bool keep_output_delta) {
    const std::size_t layers = layer_count();
    activations_.resize(layers - 1);
    matrix logits;
    for (std::size_t layer = 0; layer < layers; ++layer) {
      matrix& out = layer + 1 < layers ? activations_[layer] : logits;
      out.noalias() = weight_matrix(layer) * input_of(layer, inputs, samples);
      out.colwise() += bias_vector(layer);
      if (layer + 1 < layers) out = out.cwiseMax(0.0f);
    }
    batch_result result;
    if (keep_output_delta) output_delta_.resize(logits.rows(), logits.cols());
    for (Eigen::Index s = 0; s < logits.cols(); ++s) {
      const auto column = logits.col(s);
      Eigen::Index predicted = 0;
      const float max_logit = column.maxCoeff(&predicted);
      const auto shifted_exp = (column.array() - max_logit).exp();
      const float normaliser = shifted_exp.sum();
      const auto label = static_cast<Eigen::Index>(labels[s]);
      // -log softmax(label) = log(sum exp) - logit(label), with the max subtracted for range.
      result.loss_sum += static_cast<double>(std::log(normaliser) - (column(label) - max_logit));
      result.correct += predicted == label;
      if (keep_output_delta) {
        output_delta_.col(s) = shifted_exp.matrix() / normaliser;
        output_delta_(label, s) -= 1.0f;
      }
    }
    return result;
  }

  mlp_config config_;
  std::vector<tensor_layout> tensors_;
  std::vector<std::size_t> gradient_sizes_;
  std::vector<float> parameters_;
  std::vector<float> gradients_;
  std::span<float> gradient_storage_; ///< gradients_, or the buffer of bind_gradients
  std::vector<matrix> activations_;   ///< hidden layers' outputs after ReLU
  matrix output_delta_;               ///< d(loss)/d(logits), then scaled
  matrix hidden_delta_;               ///< d(loss)/d(pre-activation) of the layer being visited
  factors factors_{};                 ///< of the weight tensor being announced
  /// Per layer: skip the dense weight gradient (`set_weight_gradient_from_factors`).
  std::vector<bool> weight_gradient_from_factors_;
  std::uint64_t dense_weight_gradients_written_ = 0;
};

/// Knobs of SGD with momentum.
struct sgd_config {
  float learning_rate = 0.05f;
  float momentum = 0.9f;
};

/// SGD with (heavy-ball) momentum, as PyTorch's `torch.optim.SGD`:
/// `velocity = momentum * velocity + gradient; parameter -= learning_rate * velocity`.
/// Elementwise over whole buffers, so equal inputs give bitwise equal outputs on every rank.
class sgd_momentum {
public:
  sgd_momentum(std::size_t parameter_count, sgd_config config)
      : config_(config), velocity_(parameter_count, 0.0f) {}
  void step(std::span<float> parameters, std::span<const float> gradients) {
    if (parameters.size() != velocity_.size() || gradients.size() != velocity_.size())
      throw std::invalid_argument("sgd_momentum: buffer sizes differ");
    for (std::size_t i = 0; i < velocity_.size(); ++i) {
      velocity_[i] = config_.momentum * velocity_[i] + gradients[i];
      parameters[i] -= config_.learning_rate * velocity_[i];
    }
  }
  const sgd_config& config() const noexcept { return config_; }

private:
  sgd_config config_;
  std::vector<float> velocity_;
};

} // namespace train
