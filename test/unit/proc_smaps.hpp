/*
 * proc_smaps.hpp: what the kernel says of the mapping that holds an address
 * (/proc/self/smaps), for the unit tests of how memory is mapped.
 */
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace gpurec {

/*
 * The text after "name:" on the line `name` of /proc/self/smaps for the
 * mapping that holds `at` (its leading blanks and newline kept); "" when no
 * mapping holds it or it has no such line.
 */
inline std::string smaps_field(const void *at, const char *name)
{
	std::FILE *smaps = std::fopen("/proc/self/smaps", "r");
	if (smaps == nullptr)
		return "";
	auto address = reinterpret_cast<uintptr_t>(at);
	size_t name_length = std::strlen(name);
	char line[512];
	bool inside = false;
	std::string field;
	while (std::fgets(line, sizeof line, smaps))
	{
		unsigned long long begin, end;
		/* a mapping's first line: "begin-end perms offset dev inode path", the dash before the first blank */
		char *dash = std::strchr(line, '-'), *blank = std::strchr(line, ' ');
		if (std::sscanf(line, "%llx-%llx ", &begin, &end) == 2 && dash != nullptr && blank != nullptr && dash < blank)
			inside = address >= begin && address < end;
		else if (inside && std::strncmp(line, name, name_length) == 0 && line[name_length] == ':')
		{
			field = line + name_length + 1;
			break;
		}
	}
	std::fclose(smaps);
	return field;
}

} // namespace gpurec
