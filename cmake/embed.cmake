# Writes OUT, a C file defining ks_descriptor_set[] with the bytes of IN.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* Generated from ${IN}: the serialized FileDescriptorSet of ksidecar's protos. */\n#include <stddef.h>\nconst unsigned char ks_descriptor_set[] = {\n${body}0};\nconst size_t ks_descriptor_set_len = ${len};\n")
