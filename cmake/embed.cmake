# Writes OUT, a C file defining NAME[] (default ks_descriptor_set) with the bytes of IN, and
# NAME_len; WHAT says what they are, for the file's first line.
if(NOT NAME)
  set(NAME ks_descriptor_set)
  set(WHAT "the serialized FileDescriptorSet of ksidecar's protos")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* Generated from ${IN}: ${WHAT}. */\n#include <stddef.h>\nconst unsigned char ${NAME}[] = {\n${body}0};\nconst size_t ${NAME}_len = ${len};\n")
