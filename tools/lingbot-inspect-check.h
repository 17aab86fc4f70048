/* lingbot-inspect --check: is a downloaded model directory complete?
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_inspect_check (const char *dir);
