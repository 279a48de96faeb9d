# cmake -DINPUT=file -DOUTPUT=file.cpp -P EmbedText.cmake
# Writes a C++ source defining kvcache::detail::default_config_text with the file's contents.
file(READ "${INPUT}" text)
set(delim "kvcache_embedded")
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT}; do not edit.\n"
  "namespace kvcache::detail {\n"
  "extern const char* const default_config_text;\n"
  "const char* const default_config_text = R\"${delim}(${text})${delim}\";\n"
  "}  // namespace kvcache::detail\n")
