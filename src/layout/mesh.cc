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
  auto st = std::make_shared<State>();
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
      st->default_order &= ranks[i] == static_cast<int64_t>(i);
    }
    std::sort(positions.begin(), positions.end());
    for (size_t i = 1; i < positions.size(); ++i) {
      if (positions[i].first == positions[i - 1].first) {
        throw InputError("ranks", StrCat("rank ", positions[i].first, " appears twice"));
      }
    }
    if (!st->default_order) {
      st->positions =
          std::make_shared<const std::vector<std::pair<int64_t, int64_t>>>(std::move(positions));
    }
  }
  st->shape = std::move(shape);
  st->names = std::move(names);
  st->ranks = std::make_shared<const std::vector<int64_t>>(std::move(ranks));
  for (int64_t d = 0; d < static_cast<int64_t>(st->shape.size()); ++d) st->root_dims.push_back({d});
  mesh.s_ = std::move(st);
  return mesh;
}

DeviceMesh DeviceMesh::Parse(std::string_view shape, std::string_view names) {
  return Create(ParseIntList(shape, "mesh"), ParseNameList(names));
}

std::string DeviceMesh::DimLabel(int64_t dim) const {
  return s_->names.empty() ? std::to_string(dim) : s_->names.at(dim);
}

std::optional<int64_t> DeviceMesh::FindDim(std::string_view name) const {
  for (size_t i = 0; i < s_->names.size(); ++i) {
    if (s_->names[i] == name) return static_cast<int64_t>(i);
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
  std::vector<int64_t> strides(s_->shape.size(), 1);
  for (int64_t d = ndim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * s_->shape[d + 1];
  return strides;
}

int64_t DeviceMesh::PositionOf(int64_t rank) const {
  if (s_->default_order) return rank >= 0 && rank < size() ? rank : -1;
  auto it = std::lower_bound(s_->positions->begin(), s_->positions->end(),
                             std::pair<int64_t, int64_t>{rank, INT64_MIN});
  return it != s_->positions->end() && it->first == rank ? it->second : -1;
}

std::optional<std::vector<int64_t>> DeviceMesh::FindCoordinate(int64_t rank) const {
  int64_t index = PositionOf(rank);
  if (index < 0) return std::nullopt;
  std::vector<int64_t> coordinate(s_->shape.size());
  for (int64_t d = ndim() - 1; d >= 0; --d) {
    coordinate[d] = index % s_->shape[d];
    index /= s_->shape[d];
  }
  return coordinate;
}

std::vector<int64_t> DeviceMesh::GetCoordinate(int64_t rank) const {
  if (auto c = FindCoordinate(rank)) return *c;
  throw InputError("rank",
                   StrCat("rank ", rank, " is not in ", ToString(),
                          s_->default_order ? "" : " (ranks " + IntListToString(*s_->ranks) + ")"));
}

int64_t DeviceMesh::RankAt(const std::vector<int64_t>& coordinate) const {
  DTSIM_CHECK(static_cast<int64_t>(coordinate.size()) == ndim(), "coordinate ",
              IntListToString(coordinate), " for ", ToString());
  std::vector<int64_t> strides = Strides();
  int64_t index = 0;
  for (int64_t d = 0; d < ndim(); ++d) {
    DTSIM_CHECK(coordinate[d] >= 0 && coordinate[d] < s_->shape[d], "coordinate ",
                IntListToString(coordinate), " outside ", ToString());
    index += coordinate[d] * strides[d];
  }
  return (*s_->ranks)[index];
}

std::vector<int64_t> DeviceMesh::GroupAlong(int64_t dim, int64_t rank) const {
  DTSIM_CHECK(dim >= 0 && dim < ndim(), "mesh dim ", dim, " of ", ToString());
  std::vector<int64_t> coordinate = GetCoordinate(rank);
  std::vector<int64_t> group;
  group.reserve(s_->shape[dim]);
  for (int64_t i = 0; i < s_->shape[dim]; ++i) {
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
  const int64_t n = s_->shape[dim];
  const int64_t stride = Strides()[dim];
  const int64_t outer = size() / (n * stride);
  const std::vector<int64_t>& ranks = *s_->ranks;
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
    shape.push_back(s_->shape[d]);
    if (!s_->names.empty()) names.push_back(s_->names[d]);
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
  auto st = std::make_shared<State>(*result.s_);
  st->root = s_->root ? s_->root : std::make_shared<const DeviceMesh>(*this);
  st->root_dims.clear();
  for (int64_t d : dims) st->root_dims.push_back(s_->root_dims[d]);
  result.s_ = std::move(st);
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
        flat *= s_->shape[m];
        covered.insert(covered.end(), s_->root_dims[m].begin(), s_->root_dims[m].end());
      }
      new_shape.push_back(flat);
      new_names.push_back(flat_name);
      new_root_dims.push_back(covered);
    } else if (std::find(merged.begin(), merged.end(), d) == merged.end()) {
      order.push_back(d);
      new_shape.push_back(s_->shape[d]);
      new_names.push_back(s_->names.empty() ? "dim" + std::to_string(d) : s_->names[d]);
      new_root_dims.push_back(s_->root_dims[d]);
    }
  }
  // Iterate old coordinates in the permuted order.
  std::vector<int64_t> ranks;
  std::vector<int64_t> c(ndim(), 0);
  for (int64_t i = 0; i < size(); ++i) {
    ranks.push_back(RankAt(c));
    for (int64_t k = ndim() - 1; k >= 0; --k) {
      int64_t d = order[k];
      if (++c[d] < s_->shape[d]) break;
      c[d] = 0;
    }
  }
  DeviceMesh result = Create(new_shape, new_names, ranks);
  auto st = std::make_shared<State>(*result.s_);
  st->root = s_->root ? s_->root : std::make_shared<const DeviceMesh>(*this);
  st->root_dims = new_root_dims;
  result.s_ = std::move(st);
  return result;
}

std::string DeviceMesh::ToString() const {
  std::string out = "mesh[";
  for (int64_t d = 0; d < ndim(); ++d) {
    if (d) out += ", ";
    if (!s_->names.empty()) out += s_->names[d] + "=";
    out += std::to_string(s_->shape[d]);
  }
  out += "]";
  if (!s_->default_order) out += "(ranks=" + IntListToString(*s_->ranks) + ")";
  return out;
}

bool DeviceMesh::operator==(const DeviceMesh& other) const {
  if (s_ == other.s_) return true;
  return s_->shape == other.s_->shape && s_->names == other.s_->names &&
         (s_->ranks == other.s_->ranks || (s_->default_order && other.s_->default_order) ||
          *s_->ranks == *other.s_->ranks);
}

bool DeviceMesh::SameMesh(const DeviceMesh& other) const {
  if (s_ == other.s_) return true;  // copies of one mesh
  if (s_->shape != other.s_->shape || s_->names != other.s_->names) return false;
  if (s_->ranks == other.s_->ranks && s_->root == other.s_->root) return true;
  if (*s_->ranks != *other.s_->ranks) return false;
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
