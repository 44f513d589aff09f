// Chat templates (models/chat_template.hpp) against the real ones: each family's formatted
// conversation equals the text jinja2 renders from the family's Jinja template
// (tests/data/chat_templates/make_references.py wrote NAME.txt from NAME.jinja), each template text
// is detected as its family, and unknown templates, names and roles are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/chat_template.hpp"

namespace qjit_models {
namespace {

const std::filesystem::path kReferences = std::filesystem::path(QJIT_SOURCE_DIR) / "tests" / "data" / "chat_templates";

// make_references.py's CONVERSATION.
const std::vector<ChatMessage> kConversation = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello!"},
    {"assistant", "  Hi there. How can I help?  "},
    {"user", "Who are you?\nAnswer in one line."},
};

std::string read_text(const std::filesystem::path& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw std::runtime_error("cannot open " + path.string());
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

struct TemplateCase {
    std::string name;    // NAME.jinja, NAME.txt
    std::string family;  // what detect_chat_template must find
    bool rendered;       // NAME.txt holds jinja2's rendering of kConversation
};

// templates.txt: "name family rendered|detected" a line, # comments.
std::vector<TemplateCase> template_cases() {
    std::vector<TemplateCase> cases;
    std::istringstream lines(read_text(kReferences / "templates.txt"));
    std::string line;
    while (std::getline(lines, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        TemplateCase entry;
        std::string rendered;
        fields >> entry.name >> entry.family >> rendered;
        if (rendered != "rendered" && rendered != "detected") throw std::runtime_error("templates.txt: bad line: " + line);
        entry.rendered = rendered == "rendered";
        cases.push_back(entry);
    }
    return cases;
}

std::string error_of(const auto& call) {
    try {
        call();
    } catch (const std::runtime_error& error) {
        return error.what();
    }
    return "(no error)";
}

TEST(ChatTemplate, EachTemplateIsDetectedAsItsFamily) {
    const std::vector<TemplateCase> cases = template_cases();
    ASSERT_EQ(cases.size(), 12u);
    for (const TemplateCase& entry : cases) {
        const ChatTemplate family = detect_chat_template(read_text(kReferences / (entry.name + ".jinja")));
        EXPECT_EQ(chat_template_name(family), entry.family) << entry.name;
    }
}

TEST(ChatTemplate, EachFamilyFormatsAsItsJinjaTemplateRenders) {
    std::vector<std::string> families_rendered;
    for (const TemplateCase& entry : template_cases()) {
        if (!entry.rendered) continue;
        const ChatTemplate family = chat_template_by_name(entry.family);
        EXPECT_EQ(format_chat(family, kConversation, true), read_text(kReferences / (entry.name + ".txt"))) << entry.name;
        families_rendered.push_back(entry.family);
    }
    // Every family is held to at least one real template.
    for (const ChatTemplate family : chat_template_families())
        EXPECT_NE(std::find(families_rendered.begin(), families_rendered.end(), chat_template_name(family)),
                  families_rendered.end())
            << chat_template_name(family);
}

TEST(ChatTemplate, TheAssistantPromptIsAddedOnlyWhenAsked) {
    const std::vector<ChatMessage> one_turn = {{"user", "Hi"}};
    EXPECT_EQ(format_chat(ChatTemplate::chatml, one_turn, false), "<|im_start|>user\nHi<|im_end|>\n");
    EXPECT_EQ(format_chat(ChatTemplate::chatml, one_turn, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(format_chat(ChatTemplate::gemma, one_turn, false), "<start_of_turn>user\nHi<end_of_turn>\n");
    EXPECT_EQ(format_chat(ChatTemplate::llama3, one_turn, true),
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    // Llama 2's and Mistral's user turn ends with the marker the assistant answers after.
    EXPECT_EQ(format_chat(ChatTemplate::llama2, one_turn, true), format_chat(ChatTemplate::llama2, one_turn, false));
    EXPECT_EQ(format_chat(ChatTemplate::llama2, one_turn, true), "[INST] Hi [/INST]");
}

TEST(ChatTemplate, NamesRoundTripAndStopStringsAreTheEndOfTurnMarkers) {
    for (const ChatTemplate family : chat_template_families()) {
        EXPECT_EQ(chat_template_by_name(chat_template_name(family)), family) << chat_template_name(family);
        const std::vector<std::string> stops = chat_stop_strings(family);
        ASSERT_FALSE(stops.empty()) << chat_template_name(family);
        // The first stop string closes the assistant turn of the reference conversation.
        const std::string text = format_chat(family, kConversation, false);
        EXPECT_NE(text.find(stops.front()), std::string::npos) << chat_template_name(family);
    }
    EXPECT_EQ(chat_stop_strings(ChatTemplate::chatml).front(), "<|im_end|>");
    EXPECT_EQ(chat_stop_strings(ChatTemplate::llama3).front(), "<|eot_id|>");
    EXPECT_EQ(chat_stop_strings(ChatTemplate::gemma).front(), "<end_of_turn>");
}

TEST(ChatTemplate, AnUnknownTemplateIsRefusedWithItsOpening) {
    const std::string unknown = "{% for m in messages %}### {{ m.role }}:\n{{ m.content }}{% endfor %}";
    const std::string message = error_of([&] { detect_chat_template(unknown); });
    EXPECT_EQ(message,
              "the model's chat template is not one qjit knows (it starts with '{% for m in messages %}### {{ m.role }}:\\n{{ "
              "m.content }}{% e...'): known families are chatml, llama2, llama3, gemma, phi3, phi4, mistral-v7, "
              "mistral-v7-tekken");
    EXPECT_NE(error_of([] { detect_chat_template(""); }).find("empty"), std::string::npos);
    // Markers of families formatted otherwise are not guessed: Mistral v3 ([INST] without <<SYS>>), SmolVLM.
    EXPECT_NE(error_of([] { detect_chat_template("{{ bos_token }}{{ '[INST] ' + m + ' [/INST]' }}"); }).find("not one qjit knows"),
              std::string::npos);
    EXPECT_NE(error_of([] { detect_chat_template("<|im_start|>{{ role }}: <end_of_utterance>"); }).find("not one qjit knows"),
              std::string::npos);
}

TEST(ChatTemplate, AnUnknownNameIsRefusedByName) {
    EXPECT_EQ(error_of([] { chat_template_by_name("vicuna"); }),
              "unknown chat template 'vicuna': known families are chatml, llama2, llama3, gemma, phi3, phi4, mistral-v7, "
              "mistral-v7-tekken");
    EXPECT_NE(error_of([] { chat_template_by_name("ChatML"); }), "(no error)");  // names are exact
}

TEST(ChatTemplate, AnUnknownRoleIsRefusedByName) {
    const std::vector<ChatMessage> with_tool = {{"user", "Weather?"}, {"tool", "{\"sunny\": true}"}};
    for (const ChatTemplate family : chat_template_families())
        EXPECT_EQ(error_of([&] { format_chat(family, with_tool, true); }),
                  "chat message 2 of 2 has the role 'tool'; the roles are system, user and assistant")
            << chat_template_name(family);
}

}  // namespace
}  // namespace qjit_models
