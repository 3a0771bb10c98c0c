// DeviceMesh: construction, validation, coordinates, groups, submeshes and flattening.
#include "dtsim/layout/mesh.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <set>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

std::string_view Trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

// 'text', shortened to 80 characters with invalid UTF-8 replaced (values echoed in messages).
std::string Quote(std::string_view text) { return "'" + ExcerptText(text) + "'"; }

}  // namespace

std::vector<int64_t> ParseIntList(std::string_view text, const std::string& field) {
  std::string_view body = Trim(text);
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']')
      throw InputError(field, StrCat(Quote(text), " has '[' without a closing ']'"));
    body = Trim(body.substr(1, body.size() - 2));
  } else if (!body.empty() && body.front() == '(') {
    if (body.back() != ')')
      throw InputError(field, StrCat(Quote(text), " has '(' without a closing ')'"));
    body = Trim(body.substr(1, body.size() - 2));
  }
  std::vector<int64_t> values;
  if (body.empty()) return values;
  if (body.size() > kMaxIntListTextBytes) {
    throw InputError(field,
                     StrCat(Quote(text), " is ", body.size(), " characters long; lists of at most ",
                            kMaxIntListTextBytes, " characters are read"));
  }
  // "'q' is not an integer" for a list of one, "'2xq': 'q' is not an integer" in a longer one; an
  // invisible or foreign character (a pasted no-break space) is named.
  auto not_integer = [&](std::string_view item) {
    std::string why = StrCat(Quote(item), " is not an integer");
    if (const std::optional<std::string> odd = DescribeFirstNonAscii(item)) {
      why += StrCat(": it holds ", *odd);
    }
    return InputError(field, item == body ? why : StrCat(Quote(text), ": ", why));
  };
  size_t start = 0;
  while (start <= body.size()) {
    size_t end = body.find_first_of(",x", start);
    if (end == std::string_view::npos) end = body.size();
    std::string_view item = Trim(body.substr(start, end - start));
    if (item.empty()) throw InputError(field, StrCat(Quote(text), " has an empty entry"));
    size_t pos = 0;
    bool negative = item.front() == '-';
    if (item.front() == '-' || item.front() == '+') pos = 1;
    if (pos == item.size()) throw not_integer(item);
    int64_t value = 0;
    for (; pos < item.size(); ++pos) {
      char c = item[pos];
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        throw not_integer(item);
      }
      if (value > (INT64_MAX - (c - '0')) / 10) {
        // Still an error about the right thing when more junk follows: "99999999999999999999x" is
        // not an integer.
        const bool digits = std::all_of(item.begin() + pos, item.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch));
        });
        if (!digits) throw not_integer(item);
        const std::string why =
            StrCat(Quote(item), " is too large (at most ", INT64_MAX, " in magnitude)");
        throw InputError(field, item == body ? why : StrCat(Quote(text), ": ", why));
      }
      value = value * 10 + (c - '0');
    }
    values.push_back(negative ? -value : value);
    if (end == body.size()) break;
    start = end + 1;
  }
  return values;
}

std::vector<std::string> ParseNameList(std::string_view text) {
  std::vector<std::string> names;
  std::string_view body = Trim(text);
  if (body.empty()) return names;
  size_t start = 0;
  while (true) {
    size_t end = body.find(',', start);
    if (end == std::string_view::npos) end = body.size();
    names.emplace_back(Trim(body.substr(start, end - start)));
    if (end == body.size()) break;
    start = end + 1;
  }
  return names;
}

std::string IntListToString(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

DeviceMesh DeviceMesh::Create(std::vector<int64_t> shape, std::vector<std::string> names,
                              std::vector<int64_t> ranks) {
  if (shape.empty()) throw InputError("mesh", "a mesh needs at least one dim, got shape []");
  if (static_cast<int64_t>(shape.size()) > kMaxMeshDims) {
    throw InputError("mesh", StrCat("shape ", ExcerptText(IntListToString(shape)), " has ",
                                    shape.size(), " dims; a mesh has at most ", kMaxMeshDims));
  }
  int64_t total = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      throw InputError(
          "mesh", StrCat("dim ", i, " has size ", shape[i], " in shape ",
                         ExcerptText(IntListToString(shape)), "; every mesh dim must be >= 1"));
    }
    if (total > kMaxMeshRanks / shape[i]) {
      throw InputError("mesh", StrCat("shape ", ExcerptText(IntListToString(shape)),
                                      " has more than ", kMaxMeshRanks, " ranks"));
    }
    total *= shape[i];
  }
  if (!names.empty()) {
    if (names.size() != shape.size()) {
      throw InputError("names", StrCat(names.size(), " names given for a mesh of ", shape.size(),
                                       " dims (shape ", IntListToString(shape), ")"));
    }
    for (const std::string& name : names) {
      if (!IsValidUtf8(name))
        throw InputError("names", StrCat("mesh dim name ", Quote(name), " is not valid UTF-8"));
      if (name.size() > kMaxMeshDimNameBytes) {
        throw InputError("names", StrCat("mesh dim name ", Quote(name), " has ", name.size(),
                                         " bytes; names have at most ", kMaxMeshDimNameBytes));
      }
      // Control characters and invisible ones (a no-break space): "holds the control character
      // U+0009", "holds the invisible character U+00A0 (no-break space)".
      if (const std::optional<std::string> odd = DescribeFirstInvisible(name)) {
        throw InputError("names", StrCat("mesh dim name ", Quote(name), " holds ", *odd));
      }
    }
    std::set<std::string> seen;
    for (const std::string& name : names) {
      if (name.empty()) throw InputError("names", "a mesh dim name is empty");
      if (!seen.insert(name).second)
        throw InputError("names", StrCat("duplicate mesh dim name ", Quote(name)));
    }
  }
  DeviceMesh mesh;
  if (ranks.empty()) {
    ranks.resize(total);
    std::iota(ranks.begin(), ranks.end(), 0);
  } else {
    if (static_cast<int64_t>(ranks.size()) != total) {
      throw InputError("ranks", StrCat(ranks.size(), " ranks given for a mesh of shape ",
                                       IntListToString(shape), " (", total, " ranks)"));
    }
    std::vector<std::pair<int64_t, int64_t>> positions(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0) throw InputError("ranks", StrCat("rank ", ranks[i], " is negative"));
      positions[i] = {ranks[i], static_cast<int64_t>(i)};
      mesh.default_order_ &= ranks[i] == static_cast<int64_t>(i);
    }
    std::sort(positions.begin(), positions.end());
    for (size_t i = 1; i < positions.size(); ++i) {
      if (positions[i].first == positions[i - 1].first) {
        throw InputError("ranks", StrCat("rank ", positions[i].first, " appears twice"));
      }
    }
    if (!mesh.default_order_) {
      mesh.positions_ =
          std::make_shared<const std::vector<std::pair<int64_t, int64_t>>>(std::move(positions));
    }
  }
  mesh.shape_ = std::move(shape);
  mesh.names_ = std::move(names);
  mesh.ranks_ = std::make_shared<const std::vector<int64_t>>(std::move(ranks));
  for (int64_t d = 0; d < mesh.ndim(); ++d) mesh.root_dims_.push_back({d});
  return mesh;
}

DeviceMesh DeviceMesh::Parse(std::string_view shape, std::string_view names) {
  return Create(ParseIntList(shape, "mesh"), ParseNameList(names));
}

std::string DeviceMesh::DimLabel(int64_t dim) const {
  return names_.empty() ? std::to_string(dim) : names_.at(dim);
}

std::optional<int64_t> DeviceMesh::FindDim(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int64_t>(i);
  }
  return std::nullopt;
}

int64_t DeviceMesh::GetDim(std::string_view name, const std::string& field) const {
  if (auto dim = FindDim(name)) return *dim;
  std::string_view t = Trim(name);
  if (!t.empty() && t.size() <= 18 && std::all_of(t.begin(), t.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      })) {
    const int64_t dim = std::stoll(std::string(t));  // at most 18 digits: fits
    if (dim < ndim()) return dim;
  }
  std::string known;
  for (int64_t d = 0; d < ndim(); ++d) known += (d ? ", " : "") + DimLabel(d);
  throw InputError(
      field, StrCat("mesh ", ToString(), " has no dim ", Quote(name), " (dims: ", known, ")"));
}

std::vector<int64_t> DeviceMesh::Strides() const {
  std::vector<int64_t> strides(shape_.size(), 1);
  for (int64_t d = ndim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape_[d + 1];
  return strides;
}

int64_t DeviceMesh::PositionOf(int64_t rank) const {
  if (default_order_) return rank >= 0 && rank < size() ? rank : -1;
  auto it = std::lower_bound(positions_->begin(), positions_->end(),
                             std::pair<int64_t, int64_t>{rank, INT64_MIN});
  return it != positions_->end() && it->first == rank ? it->second : -1;
}

std::optional<std::vector<int64_t>> DeviceMesh::FindCoordinate(int64_t rank) const {
  int64_t index = PositionOf(rank);
  if (index < 0) return std::nullopt;
  std::vector<int64_t> coordinate(shape_.size());
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    coordinate[d] = index % shape_[d];
    index /= shape_[d];
  }
  return coordinate;
}

std::vector<int64_t> DeviceMesh::GetCoordinate(int64_t rank) const {
  if (auto c = FindCoordinate(rank)) return *c;
  throw InputError("rank",
                   StrCat("rank ", rank, " is not in ", ToString(),
                          default_order_ ? "" : " (ranks " + IntListToString(*ranks_) + ")"));
}

int64_t DeviceMesh::RankAt(const std::vector<int64_t>& coordinate) const {
  DTSIM_CHECK(static_cast<int64_t>(coordinate.size()) == ndim(), "coordinate ",
              IntListToString(coordinate), " for ", ToString());
  std::vector<int64_t> strides = Strides();
  int64_t index = 0;
  for (int64_t d = 0; d < ndim(); ++d) {
    DTSIM_CHECK(coordinate[d] >= 0 && coordinate[d] < shape_[d], "coordinate ",
                IntListToString(coordinate), " outside ", ToString());
    index += coordinate[d] * strides[d];
  }
  return (*ranks_)[index];
}

std::vector<int64_t> DeviceMesh::GroupAlong(int64_t dim, int64_t rank) const {
  DTSIM_CHECK(dim >= 0 && dim < ndim(), "mesh dim ", dim, " of ", ToString());
  std::vector<int64_t> coordinate = GetCoordinate(rank);
  std::vector<int64_t> group;
  group.reserve(shape_[dim]);
  for (int64_t i = 0; i < shape_[dim]; ++i) {
    coordinate[dim] = i;
    group.push_back(RankAt(coordinate));
  }
  return group;
}

std::vector<std::vector<int64_t>> DeviceMesh::GroupsAlong(int64_t dim) const {
  DTSIM_CHECK(dim >= 0 && dim < ndim(), "mesh dim ", dim, " of ", ToString());
  // Positions with coordinate 0 on `dim`, in row-major order: (outer, inner) with outer over the
  // dims before `dim` and inner over the dims after it; the group starting there steps by the
  // stride of `dim`.
  const int64_t n = shape_[dim];
  const int64_t stride = Strides()[dim];
  const int64_t outer = size() / (n * stride);
  const std::vector<int64_t>& ranks = *ranks_;
  std::vector<std::vector<int64_t>> groups;
  groups.reserve(outer * stride);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < stride; ++i) {
      const int64_t base = o * n * stride + i;
      std::vector<int64_t> group(n);
      for (int64_t k = 0; k < n; ++k) group[k] = ranks[base + k * stride];
      groups.push_back(std::move(group));
    }
  }
  return groups;
}

DeviceMesh DeviceMesh::Submesh(const std::vector<std::string>& dim_names, int64_t rank) const {
  if (dim_names.empty()) throw InputError("submesh", "no mesh dims named");
  std::vector<int64_t> dims;
  for (const std::string& name : dim_names) {
    int64_t d = GetDim(name, "submesh");
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      throw InputError("submesh", StrCat("mesh dim ", Quote(name), " named twice"));
    }
    dims.push_back(d);
  }
  std::vector<int64_t> base = GetCoordinate(rank);
  std::vector<int64_t> shape, ranks;
  std::vector<std::string> names;
  for (int64_t d : dims) {
    shape.push_back(shape_[d]);
    if (!names_.empty()) names.push_back(names_[d]);
  }
  // Walk the sub-coordinates row-major.
  std::vector<int64_t> sub(dims.size(), 0);
  int64_t count = 1;
  for (int64_t s : shape) count *= s;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> c = base;
    for (size_t k = 0; k < dims.size(); ++k) c[dims[k]] = sub[k];
    ranks.push_back(RankAt(c));
    for (int64_t k = static_cast<int64_t>(dims.size()) - 1; k >= 0; --k) {
      if (++sub[k] < shape[k]) break;
      sub[k] = 0;
    }
  }
  DeviceMesh result = Create(shape, names, ranks);
  result.root_ = root_ ? root_ : std::make_shared<const DeviceMesh>(*this);
  result.root_dims_.clear();
  for (int64_t d : dims) result.root_dims_.push_back(root_dims_[d]);
  return result;
}

DeviceMesh DeviceMesh::Flatten(const std::vector<std::string>& dim_names,
                               const std::string& flat_name) const {
  if (dim_names.empty()) throw InputError("flatten", "no mesh dims named");
  std::vector<int64_t> merged;
  for (const std::string& name : dim_names) {
    int64_t d = GetDim(name, "flatten");
    if (std::find(merged.begin(), merged.end(), d) != merged.end()) {
      throw InputError("flatten", StrCat("mesh dim ", Quote(name), " named twice"));
    }
    merged.push_back(d);
  }
  // New dim order: kept dims in order, the merged dim where the first merged one was.
  int64_t first = *std::min_element(merged.begin(), merged.end());
  std::vector<int64_t> order;  // old dims in the order the new layout iterates them
  std::vector<int64_t> new_shape;
  std::vector<std::string> new_names;
  std::vector<std::vector<int64_t>> new_root_dims;
  for (int64_t d = 0; d < ndim(); ++d) {
    if (d == first) {
      int64_t flat = 1;
      std::vector<int64_t> covered;
      for (int64_t m : merged) {
        order.push_back(m);
        flat *= shape_[m];
        covered.insert(covered.end(), root_dims_[m].begin(), root_dims_[m].end());
      }
      new_shape.push_back(flat);
      new_names.push_back(flat_name);
      new_root_dims.push_back(covered);
    } else if (std::find(merged.begin(), merged.end(), d) == merged.end()) {
      order.push_back(d);
      new_shape.push_back(shape_[d]);
      new_names.push_back(names_.empty() ? "dim" + std::to_string(d) : names_[d]);
      new_root_dims.push_back(root_dims_[d]);
    }
  }
  // Iterate old coordinates in the permuted order.
  std::vector<int64_t> ranks;
  std::vector<int64_t> c(ndim(), 0);
  for (int64_t i = 0; i < size(); ++i) {
    ranks.push_back(RankAt(c));
    for (int64_t k = ndim() - 1; k >= 0; --k) {
      int64_t d = order[k];
      if (++c[d] < shape_[d]) break;
      c[d] = 0;
    }
  }
  DeviceMesh result = Create(new_shape, new_names, ranks);
  result.root_ = root_ ? root_ : std::make_shared<const DeviceMesh>(*this);
  result.root_dims_ = new_root_dims;
  return result;
}

std::string DeviceMesh::ToString() const {
  std::string out = "mesh[";
  for (int64_t d = 0; d < ndim(); ++d) {
    if (d) out += ", ";
    if (!names_.empty()) out += names_[d] + "=";
    out += std::to_string(shape_[d]);
  }
  out += "]";
  if (!default_order_) out += "(ranks=" + IntListToString(*ranks_) + ")";
  return out;
}

bool DeviceMesh::operator==(const DeviceMesh& other) const {
  return shape_ == other.shape_ && names_ == other.names_ &&
         (ranks_ == other.ranks_ || (default_order_ && other.default_order_) ||
          *ranks_ == *other.ranks_);
}

bool DeviceMesh::SameMesh(const DeviceMesh& other) const {
  if (shape_ != other.shape_ || names_ != other.names_) return false;
  if (ranks_ == other.ranks_ && root_ == other.root_) return true;
  if (*ranks_ != *other.ranks_) return false;
  if (is_root() != other.is_root()) return false;
  return is_root() || root().SameMesh(other.root());
}

std::string CoordinateText(const DeviceMesh& mesh, const std::vector<int64_t>& c) {
  if (mesh.names().empty()) return IntListToString(c);
  std::string out = "[";
  for (size_t d = 0; d < c.size(); ++d) out += StrCat(d ? ", " : "", mesh.DimLabel(d), "=", c[d]);
  return out + "]";
}

}  // namespace dtsim
